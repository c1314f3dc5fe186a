package goccl

import (
	"context"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
)

// AllToAll sends block j of send to rank j and receives rank j's block for
// this rank into block j of recv; blocks are len(send)/Size() elements
// (torch's all_to_all_single without splits).
func (c *Comm) AllToAll(ctx context.Context, send, recv any) error {
	return checked(c.allToAll(send, nil, recv, nil)).exec(ctx)
}

// AllToAllAsync starts AllToAll and returns at once.
func (c *Comm) AllToAllAsync(ctx context.Context, send, recv any) *Work {
	k, err := c.allToAll(send, nil, recv, nil)
	return start(ctx, checked(k, err))
}

// AllToAllSplit is AllToAll with per-rank block sizes: sendCounts[j]
// elements go to rank j and recvCounts[j] come from it (all_to_all_single
// with input and output splits). A nil counts slice means equal blocks.
func (c *Comm) AllToAllSplit(ctx context.Context, send any, sendCounts []int, recv any, recvCounts []int) error {
	return checked(c.allToAll(send, sendCounts, recv, recvCounts)).exec(ctx)
}

func (c *Comm) splits(name, what string, v view, counts []int) ([]int, error) {
	n := c.Size()
	if counts == nil {
		if v.n%n != 0 {
			return nil, invalid(name, c.rank, "%s has %d elements, not divisible by size %d", what, v.n, n)
		}
		return equalCounts(n, v.n/n), nil
	}
	if len(counts) != n {
		return nil, invalid(name, c.rank, "%s counts has %d entries, want %d", what, len(counts), n)
	}
	sum := 0
	for j, k := range counts {
		if k < 0 {
			return nil, invalid(name, c.rank, "%s counts[%d] = %d is negative", what, j, k)
		}
		sum += k
	}
	if sum != v.n {
		return nil, invalid(name, c.rank, "%s counts add up to %d but the buffer has %d elements", what, sum, v.n)
	}
	return counts, nil
}

func (c *Comm) allToAll(send any, sendCounts []int, recv any, recvCounts []int) (*call, error) {
	const name = commslog.AllToAllSingle
	sv, rv, err := c.checkPair(name, send, recv)
	if err != nil {
		return nil, err
	}
	sc, err := c.splits(name, "send", sv, sendCounts)
	if err != nil {
		return nil, err
	}
	rc, err := c.splits(name, "recv", rv, recvCounts)
	if err != nil {
		return nil, err
	}
	count := -1 // splits differ by rank; a message of the wrong length is caught on receipt
	if sendCounts == nil && recvCounts == nil {
		count = rv.n
	}
	if sv.dev != nil && rv.dev != nil {
		if err := c.sameDevice(name, sv, rv); err != nil {
			return nil, err
		}
	}
	return c.allToAllv(name, []view{sv}, sc, rv, rc, count), nil
}

// allToAllv runs an all-to-all of parts (packed in order) with send counts
// sc and receive counts rc. count is what every rank must agree on (-1:
// nothing beyond the dtype).
func (c *Comm) allToAllv(name string, parts []view, sc []int, rv view, rc []int, count int) *call {
	a, fn := pick(c, algo.AllToAll, rv.bytes(), "", allToAllAlgos)
	bytes := 0
	for _, p := range parts {
		bytes += p.bytes()
	}
	k := c.newCall(name, rv.dt, bytes, a).agree(count, 0, -1)
	p := c.peers(k, rv.dt, nil)
	if len(parts) == 1 {
		c.delegate(k, parts[0].dev != nil || rv.dev != nil, backend.Call{Coll: backend.AllToAll, Send: parts[0].b, Recv: rv.b, SendDev: parts[0].dev, RecvDev: rv.dev, DType: rv.dt, SendCounts: sc, RecvCounts: rc})
	}
	if len(parts) == 1 && parts[0].dev != nil && rv.dev != nil {
		k.useDevice(rv.dev.Device())
		sv := parts[0]
		k.run = func(ctx context.Context) error {
			return c.onDevice(ctx, p, rv, 0, func(dp *devPeers, recv []byte) error {
				send, err := dp.Stand(sv.dev, 0, sv.bytes())
				if err != nil {
					return err
				}
				return fn(ctx, dp, send, sc, recv, rc)
			})
		}
		return k
	}
	k.run = func(ctx context.Context) error {
		var sendHost []byte
		if len(parts) == 1 && parts[0].dev == nil {
			sendHost = parts[0].b
		} else {
			sendHost = scratch.Get(bytes)
			defer scratch.Put(sendHost)
			if err := c.pack(ctx, sendHost, parts); err != nil {
				return err
			}
		}
		s, err := c.stage(ctx, rv, false)
		if err != nil {
			return err
		}
		if err := fn(ctx, p, sendHost, sc, s.host, rc); err != nil {
			c.unstage(ctx, s, false)
			return err
		}
		return c.unstage(ctx, s, true)
	}
	return k
}

// AllToAllList sends send[j] to rank j and receives rank j's message into
// recv[j] (torch's all_to_all). Lengths may differ per rank but must match
// between the sender and the receiver.
func (c *Comm) AllToAllList(ctx context.Context, send, recv []any) error {
	const name = commslog.AllToAll
	if len(send) != c.Size() || len(recv) != c.Size() {
		return invalid(name, c.rank, "need %d send and recv buffers, got %d and %d", c.Size(), len(send), len(recv))
	}
	svs, _, err := c.checkList(name, "send", send)
	if err != nil {
		return err
	}
	rvs, rtotal, err := c.checkList(name, "recv", recv)
	if err != nil {
		return err
	}
	if err := sameType(name, c, svs[0], rvs[0]); err != nil {
		return err
	}
	sc := make([]int, len(svs))
	rc := make([]int, len(rvs))
	for j := range svs {
		sc[j], rc[j] = svs[j].n, rvs[j].n
	}
	flat := scratch.Get(rtotal * rvs[0].dt.Size())
	defer scratch.Put(flat)
	fv := view{dt: rvs[0].dt, n: rtotal, b: flat}
	if err := c.allToAllv(name, svs, sc, fv, rc, -1).exec(ctx); err != nil {
		return err
	}
	return c.unpack(ctx, flat, rvs)
}
