package goccl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
)

// Every collective's first message from one rank to another carries a
// fingerprint of the call: which collective, its sequence number, the
// element count, dtype, reduction and root. The receiver compares it with
// its own call and fails with ErrMismatch, naming both calls, instead of
// hanging or reducing bytes it misreads. The fingerprint rides in front of
// small first messages (one message, one copy of at most fpInline bytes)
// and as its own 32-byte message before larger ones. A receive of the
// wrong length still delivers its prefix (transport.Endpoint.Irecv), so
// the fingerprint is read even when the ranks disagree on the size.
//
//	0    2   3     4     5    8      12           16       24    32
//	| GF | op | dtype | redop | - | root | group id lo | count | seq |

const (
	fpLen    = 32
	fpInline = 4 << 10
)

type fingerprint [fpLen]byte

var fpOps = commslog.OpNames()

func makeFingerprint(k *call, group uint64, tag transport.Tag) (f fingerprint) {
	f[0], f[1] = 'G', 'F'
	f[2] = uint8(slices.Index(fpOps, k.op) + 1)
	f[3] = uint8(k.dt)
	f[4] = uint8(k.redop)
	binary.LittleEndian.PutUint32(f[8:], uint32(int32(k.root)))
	binary.LittleEndian.PutUint32(f[12:], uint32(group))
	binary.LittleEndian.PutUint64(f[16:], uint64(k.count))
	binary.LittleEndian.PutUint64(f[24:], uint64(tag)&(tagP2P-1))
	return f
}

// String describes the call a fingerprint stands for, as an error shows it.
func (f fingerprint) String() string {
	if f[0] != 'G' || f[1] != 'F' {
		return "a message without a fingerprint"
	}
	op := fmt.Sprintf("op#%d", f[2])
	if i := int(f[2]) - 1; i >= 0 && i < len(fpOps) {
		op = fpOps[i]
	}
	s := fmt.Sprintf("%s(dtype=%v", op, reduceop.DType(f[3]))
	if count := int64(binary.LittleEndian.Uint64(f[16:])); count >= 0 {
		s += fmt.Sprintf(", count=%d", count)
	}
	if f[4] != 0 {
		s += fmt.Sprintf(", op=%v", reduceop.Op(f[4]))
	}
	if root := int32(binary.LittleEndian.Uint32(f[8:])); root >= 0 {
		s += fmt.Sprintf(", root=%d", root)
	}
	return s + fmt.Sprintf(") #%d", binary.LittleEndian.Uint64(f[24:]))
}

// sendFirst sends b to peer to with the fingerprint in front.
func (p *peers) sendFirst(to int, b []byte) algo.Request {
	ep, dst := p.c.shared.ep, p.c.ranks[to]
	if len(b) <= fpInline {
		m := scratch.Get(fpLen + len(b))
		copy(m, p.fp[:])
		copy(m[fpLen:], b)
		return &request{p: p, peer: to, dir: "->", r: ep.Isend(dst, p.tag, m), scratch: m}
	}
	fr := ep.Isend(dst, p.tag, p.fp[:])
	return &request{p: p, peer: to, dir: "->", r: ep.Isend(dst, p.tag, b), first: fr}
}

// recvFirst receives the first message from peer from, with its
// fingerprint, into b.
func (p *peers) recvFirst(from int, b []byte) algo.Request {
	ep, src := p.c.shared.ep, p.c.ranks[from]
	if len(b) <= fpInline {
		m := scratch.Get(fpLen + len(b))
		clear(m[:fpLen]) // a shorter message must not leave an old fingerprint here
		return &fpRecv{request: request{p: p, peer: from, dir: "<-", r: ep.Irecv(src, p.tag, m)}, msg: m, dst: b}
	}
	m := scratch.Get(fpLen)
	clear(m)
	fr := ep.Irecv(src, p.tag, m)
	return &fpRecv{request: request{p: p, peer: from, dir: "<-", r: ep.Irecv(src, p.tag, b), first: fr}, msg: m}
}

// fpRecv is a first receive: it checks the peer's fingerprint before it
// reports anything else.
type fpRecv struct {
	request
	msg []byte // fingerprint (+ payload when dst != nil)
	dst []byte // where the payload goes, for an inline fingerprint
}

func (r *fpRecv) Wait(ctx context.Context) error {
	if r.msg == nil {
		return nil // waited before, successfully
	}
	fr := r.r
	if r.first != nil {
		fr = r.first
	}
	err := fr.Wait(ctx)
	if err == nil || errors.Is(err, transport.ErrLength) {
		var theirs fingerprint
		copy(theirs[:], r.msg)
		if len(r.msg) < fpLen || theirs != r.p.fp {
			return &Error{Op: r.p.op, Rank: r.p.c.rank, Peer: r.peer, Dir: r.dir,
				Err: &mismatchError{mine: r.p.fp, theirs: theirs, peer: r.peer}}
		}
	}
	if err != nil {
		return r.wrap(err)
	}
	if r.first != nil {
		if err := r.request.Wait(ctx); err != nil {
			return err
		}
	} else {
		copy(r.dst, r.msg[fpLen:])
	}
	scratch.Put(r.msg)
	r.msg = nil
	return nil
}

// mismatchError is ErrMismatch with both calls; an abort notice carries
// the two fingerprints to the other ranks (blame.go).
type mismatchError struct {
	mine, theirs fingerprint
	peer         int // group rank that sent theirs
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("%v: this rank called %v, peer %d called %v", ErrMismatch, e.mine, e.peer, e.theirs)
}

func (e *mismatchError) Unwrap() error { return ErrMismatch }
