package goccl

import (
	"context"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/transport"
)

// A coalesced call's ring (coalesced.go) sends a range of the caller's
// slices that spans several of them as one vectored message, where the
// endpoint carries those (transport.VecEndpoint), instead of one message a
// slice: over shm each message is a hand-off, which 16 slices of 1 MiB
// paid sixteen times where the flat call paid three (issue 34). The first
// message to a peer keeps its fingerprint, as sendFirst and recvFirst lay
// it out, so the wire is the same as for a flat buffer.

var _ algo.VecPeers = (*peers)(nil)

// Vectored implements algo.VecPeers: the endpoint's answer for the link
// to group rank peer, which both ends give alike.
func (p *peers) Vectored(peer int) bool { return p.c.shared.counts.Vectored(p.c.ranks[peer]) }

// IsendV implements algo.VecPeers.
func (p *peers) IsendV(to int, bufs [][]byte) algo.Request {
	v, dst := p.c.shared.counts, p.c.ranks[to] // packs where the endpoint has no vectored messages
	if p.check && p.sent.Add(to) {
		if transport.VecLen(bufs) <= fpInline {
			// Inline behind the fingerprint: a copy of at most fpInline bytes.
			return p.sendFirst(to, packed(bufs))
		}
		fr := p.c.shared.ep.Isend(dst, p.tag, p.fp[:])
		r := p.reqs.Next()
		*r = request{p: p, peer: to, dir: "->", r: v.IsendV(dst, p.tag, bufs), first: fr}
		return r
	}
	r := p.reqs.Next()
	*r = request{p: p, peer: to, dir: "->", r: v.IsendV(dst, p.tag, bufs)}
	return r
}

// IrecvV implements algo.VecPeers.
func (p *peers) IrecvV(from int, bufs [][]byte) algo.Request {
	v := p.c.shared.counts
	if p.check && !p.heard.Has(from) && transport.VecLen(bufs) <= fpInline {
		// A first message small enough to carry its fingerprint inline:
		// received whole and scattered (a copy of at most fpInline bytes).
		m := make([]byte, transport.VecLen(bufs))
		return scatterRecv{p.Irecv(from, m), m, bufs}
	}
	src := p.c.ranks[from]
	if p.check && p.heard.Add(from) {
		m, pooled := p.msgBuf(fpLen)
		clear(m)
		fr := p.c.shared.ep.Irecv(src, p.tag, m)
		r := p.fpReqs.Next()
		*r = fpRecv{request: request{p: p, peer: from, dir: "<-", r: v.IrecvV(src, p.tag, bufs), first: fr}, msg: m, pooled: pooled}
		return r
	}
	r := p.reqs.Next()
	*r = request{p: p, peer: from, dir: "<-", r: v.IrecvV(src, p.tag, bufs)}
	return r
}

// packed returns the pieces of bufs joined in a new buffer.
func packed(bufs [][]byte) []byte {
	m := make([]byte, transport.VecLen(bufs))
	transport.Gather(m, bufs)
	return m
}

// scatterRecv is a receive into m that scatters it into bufs once it
// succeeded.
type scatterRecv struct {
	algo.Request
	m    []byte
	bufs [][]byte
}

func (r scatterRecv) Wait(ctx context.Context) error {
	if err := r.Request.Wait(ctx); err != nil {
		return err
	}
	transport.Scatter(r.bufs, r.m)
	return nil
}
