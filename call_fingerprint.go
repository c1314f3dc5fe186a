package goccl

import (
	"context"
	"errors"
	"fmt"
	"math/bits"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/transport"
)

// Every collective's first message from one rank to another carries a
// fingerprint of the call: which collective, its sequence number, the
// element count, dtype, reduction and root (its layout is package wire's).
// The receiver compares it with its own call and fails with ErrMismatch,
// naming both calls, instead of hanging or reducing bytes it misreads.
// The fingerprint rides in front of small first messages (one message,
// one copy of at most fpInline bytes) and as its own 32-byte message
// before larger ones. A receive of the wrong length still delivers its
// prefix (transport.Endpoint.Irecv), so the fingerprint is read even when
// the ranks disagree on the size.
//
// The fingerprint also says how a call's bytes are cut: the message size
// a device buffer is cut into (device_path.go) and the segment size the
// group's pipelined algorithms use (call_segment.go), since ranks that cut
// differently would misread each other's messages.

const (
	fpLen    = wire.FPLen
	fpInline = wire.FPInline
)

type fingerprint = wire.Fingerprint

// setFP makes f k's fingerprint in place (wire.Fingerprint.Set).
func setFP(f *fingerprint, k *call, group uint64, tag transport.Tag) {
	var chunk uint8
	if k.chunk > 0 {
		chunk = uint8(bits.Len(uint(k.chunk)) - 1)
	}
	f.Set(wire.OpNumber(k.op), k.dt, k.redop, chunk, k.c.segLog, k.root, group, k.count, wire.Seq(tag))
}

// fpSmall is the longest payload whose first message is built in a
// buffer inside the call (msgBuf), not one from the scratch pool.
const fpSmall = 32

// msgBuf returns a buffer of n bytes for a first message, and whether it
// came from the scratch pool (it goes back there once done).
func (p *peers) msgBuf(n int) (m []byte, pooled bool) {
	if n <= fpLen+fpSmall {
		return p.fpBufs.Next()[:n], false
	}
	return scratch.Get(n), true
}

// sendFirst sends b to peer to with the fingerprint in front.
func (p *peers) sendFirst(to int, b []byte) algo.Request {
	ep, dst := p.c.shared.ep, p.c.ranks[to]
	if len(b) <= fpInline {
		m, pooled := p.msgBuf(fpLen + len(b))
		copy(m, p.fp[:])
		copy(m[fpLen:], b)
		r := p.reqs.Next()
		*r = request{p: p, peer: to, dir: "->", r: ep.Isend(dst, p.tag, m)}
		if pooled {
			r.scratch = m
		}
		return r
	}
	fr := ep.Isend(dst, p.tag, p.fp[:])
	r := p.reqs.Next()
	*r = request{p: p, peer: to, dir: "->", r: ep.Isend(dst, p.tag, b), first: fr}
	return r
}

// recvFirst receives the first message from peer from, with its
// fingerprint, into b.
func (p *peers) recvFirst(from int, b []byte) algo.Request {
	ep, src := p.c.shared.ep, p.c.ranks[from]
	if len(b) <= fpInline {
		m, pooled := p.msgBuf(fpLen + len(b))
		clear(m[:fpLen]) // a shorter message must not leave an old fingerprint here
		r := p.fpReqs.Next()
		*r = fpRecv{request: request{p: p, peer: from, dir: "<-", r: ep.Irecv(src, p.tag, m)}, msg: m, dst: b, pooled: pooled}
		return r
	}
	m, pooled := p.msgBuf(fpLen)
	clear(m)
	fr := ep.Irecv(src, p.tag, m)
	r := p.fpReqs.Next()
	*r = fpRecv{request: request{p: p, peer: from, dir: "<-", r: ep.Irecv(src, p.tag, b), first: fr}, msg: m, pooled: pooled}
	return r
}

// fpRecv is a first receive: it checks the peer's fingerprint before it
// reports anything else.
type fpRecv struct {
	request
	msg    []byte // fingerprint (+ payload when dst != nil)
	dst    []byte // where the payload goes, for an inline fingerprint
	pooled bool   // msg is from the scratch pool (msgBuf)
}

func (r *fpRecv) Wait(ctx context.Context) error {
	r.p.waitOn.Store(int32(r.peer + 1))
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
		if lm := (*transport.LengthMismatch)(nil); errors.As(err, &lm) && r.first == nil {
			// The fingerprint matched; the payload behind it did not.
			return r.lengthMismatch(lm.Got-fpLen, lm.Want-fpLen)
		}
		return r.wrap(err)
	}
	if r.first != nil {
		if err := r.request.Wait(ctx); err != nil {
			return err
		}
	} else {
		copy(r.dst, r.msg[fpLen:])
	}
	r.release()
	if r.pooled {
		scratch.Put(r.msg)
	}
	r.msg = nil
	return nil
}

// mismatchError is ErrMismatch with both calls; an abort notice carries
// the two fingerprints to the other ranks (abort_blame.go).
type mismatchError struct {
	mine, theirs fingerprint
	peer         int // group rank that sent theirs
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("%v: this rank called %v, peer %d called %v", ErrMismatch, e.mine, e.peer, e.theirs)
}

func (e *mismatchError) Unwrap() error { return ErrMismatch }

// describe names this rank's call for an error: its fingerprint when the
// check is on, else the operation.
func (p *peers) describe() string {
	if !p.check {
		return p.op
	}
	return "this rank called " + p.fp.String()
}

// rootChecked runs a rooted collective (broadcast, reduce, gather,
// scatter), or one of zero elements, with a ring of fingerprints beside
// it. (A call of zero elements sends nothing, so a rank that made another
// call in its place would wait on it until the timeout.)
//
// In a rooted collective some ranks receive nothing: the root of a
// broadcast or a scatter, the leaves of a reduce or a gather. A rank that
// disagrees about the root may then never see a fingerprint and return
// as if all were well, or two ranks that each take the other for the root
// both wait for bytes that never come. So every rank also sends its
// fingerprint to the next rank and checks the previous rank's, as the
// first message between the two; the algorithm's later messages between
// them go without one. Ranks that do not all name the same root cannot
// all agree with their left neighbour: at least one of them fails with
// ErrMismatch, which ends the call on that rank at once (it cancels the
// algorithm's context), and its abort notice reaches the others. Four
// ranks, rank 3 taking itself for the root:
//
//	rank 0 -> 1 (root=0, agree)   rank 1 -> 2 (root=0, agree)
//	rank 2 -> 3 (root=0: rank 3 fails, root=3 here)
//	rank 3 -> 0 (root=3: rank 0 fails, root=0 here)
//
// Cost: one 32-byte message per rank and one goroutine, sent at the start
// and waited for at the end, so it adds at most one message latency to
// the ranks that would otherwise finish first (a broadcast's root).
func (p *peers) rootChecked(ctx context.Context, run func(context.Context) error) error {
	n, r := p.Size(), p.Rank()
	out := p.Isend((r+1)%n, nil)
	in := p.Irecv((r+n-1)%n, nil)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	checked := make(chan error, 1)
	go func() {
		err := in.Wait(ctx)
		if errors.Is(err, ErrMismatch) {
			cancel(err)
		}
		checked <- err
	}()
	err := run(ctx)
	if err != nil {
		cancel(err)
	}
	cerr := <-checked
	switch {
	case errors.Is(cerr, ErrMismatch):
		return cerr // the cause, whatever the algorithm saw after it
	case err != nil:
		return err
	case cerr != nil:
		return cerr
	}
	return out.Wait(ctx)
}
