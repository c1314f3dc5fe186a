package goccl

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/transport"
)

// Point to point. Send and Recv pair by (peer, tag) in order, as MPI's
// do. With the mismatch check on (the default), every message carries a
// 16-byte header with its dtype and element count (wire.P2PHeader), in
// front of a payload of at most fpInline bytes or as its own message
// before a larger one, so a Recv of []int32 meeting a Send of []float32,
// or of another length, fails with ErrMismatch naming both sides instead
// of returning reinterpreted bits.
//
// A header and its payload are posted together under a lock, so that
// concurrent sends (or receives) on one tag cannot interleave them.

const p2pHdrLen = wire.P2PHeaderLen

// MaxTag is the largest tag Send and Recv accept: the largest int on
// every platform, 32-bit ones included (MPI promises at least 32767). The
// tag travels in the low 39 bits of the transport's tag.
const MaxTag = 1<<31 - 1

// p2p checks a Send's or Recv's arguments, then that c is usable.
func (c *Comm) p2p(name string, buf any, peer, tag int) (view, transport.Tag, error) {
	v, err := c.check(name, "buf", buf)
	if err != nil {
		return v, 0, err
	}
	if peer < 0 || peer >= c.Size() {
		return v, 0, invalid(name, c.rank, "peer %d out of range [0,%d)", peer, c.Size())
	}
	if tag < 0 || tag > MaxTag {
		return v, 0, invalid(name, c.rank, "tag %d out of range [0,%d]", tag, MaxTag)
	}
	return v, wire.P2PTag(c.id, uint64(tag)), c.usable(name)
}

// Send sends buf to rank dst with a tag; the matching Recv on dst must use
// the same tag, dtype and length. Messages with one tag between two ranks
// arrive in order.
//
// Send returns once goccl is done with buf, however it ends. If ctx ends
// first, the message may be half sent: the communicator is aborted (the
// peer cannot tell what it got) and Send returns after that, with an
// *Error that wraps ctx's error (and ErrTimeout for a deadline).
func (c *Comm) Send(ctx context.Context, buf any, dst, tag int) error {
	return c.send(ctx, buf, dst, tag).exec(ctx)
}

// Recv receives the next message with tag from rank src into buf, which
// must have the dtype and the length that were sent.
//
// Recv returns once goccl is done with buf: no byte lands in it after
// Recv returns. If ctx ends while the receive is posted, the communicator
// is aborted (a message already on its way would otherwise land later, or
// be taken by the next Recv), and Recv returns after the endpoint has let
// go of buf, with an *Error that names src and wraps ctx's error.
func (c *Comm) Recv(ctx context.Context, buf any, src, tag int) error {
	return c.recv(ctx, buf, src, tag).exec(ctx)
}

// SendAsync starts Send (torch's isend). The message is ordered against
// other sends to dst with the same tag when SendAsync is called.
func (c *Comm) SendAsync(ctx context.Context, buf any, dst, tag int) *Work {
	return start(ctx, c.send(ctx, buf, dst, tag))
}

// send checks a Send's arguments, posts its message and returns the call
// that waits for it.
func (c *Comm) send(ctx context.Context, buf any, dst, tag int) *call {
	const name = commslog.Send
	v, t, err := c.p2p(name, buf, dst, tag)
	if err == nil && ctx.Err() != nil {
		err = c.notStarted(name, ctx.Err())
	}
	if err != nil {
		return failed(err)
	}
	if k := c.p2pBackend(name, v, backend.Call{Coll: backend.Send, Send: v.b, DType: v.dt, Root: dst, Tag: tag}); k != nil {
		return k
	}
	host := v.b
	if v.dev != nil {
		host = scratch.Get(v.bytes())
		if err := c.toHost(ctx, host, v.dev, 0); err != nil {
			return failed(&Error{Op: name, Rank: c.rank, Peer: dst, Err: err})
		}
	}
	ep, to := c.shared.ep, c.ranks[dst]
	var first transport.Request
	var msg []byte // header and payload in one pooled buffer, or nil
	c.p2pMu.Lock()
	switch {
	case c.opts.noCheck:
	case len(host) <= fpInline:
		h := wire.NewP2PHeader(v.dt, v.n)
		msg = scratch.Get(p2pHdrLen + len(host))
		copy(msg, h[:])
		copy(msg[p2pHdrLen:], host)
	default:
		h := wire.NewP2PHeader(v.dt, v.n)
		first = ep.Isend(to, t, h[:])
	}
	var r transport.Request
	if msg != nil {
		r = ep.Isend(to, t, msg)
	} else {
		r = ep.Isend(to, t, host)
	}
	c.p2pMu.Unlock()
	k := c.newCall(name, v.dt, v.bytes(), "")
	k.run = func(ctx context.Context) error {
		var err error
		if first != nil {
			err = first.Wait(ctx)
		}
		if err == nil {
			err = r.Wait(ctx)
		}
		if err != nil {
			return &Error{Op: name, Rank: c.rank, Peer: dst, Dir: "->", Err: classify(err)}
		}
		if msg != nil {
			scratch.Put(msg)
		}
		if v.dev != nil {
			scratch.Put(host)
		}
		return nil
	}
	return k
}

// RecvAsync starts Recv (torch's irecv). The receive is posted when
// RecvAsync is called.
func (c *Comm) RecvAsync(ctx context.Context, buf any, src, tag int) *Work {
	return start(ctx, c.recv(ctx, buf, src, tag))
}

// recv checks a Recv's arguments, posts its receive and returns the call
// that waits for it. A context that has ended already posts nothing.
func (c *Comm) recv(ctx context.Context, buf any, src, tag int) *call {
	const name = commslog.Recv
	v, t, err := c.p2p(name, buf, src, tag)
	if err == nil && ctx.Err() != nil {
		err = c.notStarted(name, ctx.Err())
	}
	if err != nil {
		return failed(err)
	}
	if k := c.p2pBackend(name, v, backend.Call{Coll: backend.Recv, Recv: v.b, DType: v.dt, Root: src, Tag: tag}); k != nil {
		return k
	}
	host := v.b
	if v.dev != nil {
		host = scratch.Get(v.bytes())
	}
	ep, from := c.shared.ep, c.ranks[src]
	want := wire.NewP2PHeader(v.dt, v.n)
	var first transport.Request
	var hdr, msg []byte // the received header; header and payload when inline
	c.p2pMu.Lock()
	switch {
	case c.opts.noCheck:
	case len(host) <= fpInline:
		msg = scratch.Get(p2pHdrLen + len(host))
		clear(msg[:p2pHdrLen])
		hdr = msg[:p2pHdrLen]
	default:
		hdr = make([]byte, p2pHdrLen)
		first = ep.Irecv(from, t, hdr)
	}
	var r transport.Request
	if msg != nil {
		r = ep.Irecv(from, t, msg)
	} else {
		r = ep.Irecv(from, t, host)
	}
	c.p2pMu.Unlock()
	k := c.newCall(name, v.dt, v.bytes(), "")
	k.run = func(ctx context.Context) error {
		fail := func(err error) error {
			return &Error{Op: name, Rank: c.rank, Peer: src, Dir: "<-", Err: err}
		}
		hr := r // the request the header arrives in
		if first != nil {
			hr = first
		}
		err := hr.Wait(ctx)
		if hdr != nil && (err == nil || errors.Is(err, transport.ErrLength)) {
			var got wire.P2PHeader
			copy(got[:], hdr)
			if got != want {
				// The sender's Send differs; its payload, if it comes
				// apart, is never received: the abort ends the link.
				return fail(fmt.Errorf("%w: this rank called recv(%v) from rank %d with tag %d, rank %d called send(%v)",
					ErrMismatch, want, src, tag, src, got))
			}
		}
		if err == nil && first != nil {
			err = r.Wait(ctx)
		}
		if err != nil {
			if lm := (*transport.LengthMismatch)(nil); errors.As(err, &lm) {
				return fail(fmt.Errorf("%w: this rank called recv of %d bytes from rank %d with tag %d, which sent %d bytes",
					ErrMismatch, len(host), src, tag, lm.Got-(len(msg)-len(host))))
			}
			return fail(classify(err))
		}
		if msg != nil {
			copy(host, msg[p2pHdrLen:])
			scratch.Put(msg)
		}
		if v.dev != nil {
			defer scratch.Put(host)
			return c.fromHost(ctx, v.dev, 0, host)
		}
		return nil
	}
	return k
}
