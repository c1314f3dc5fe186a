package goccl

import (
	"context"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
)

// AllGather gathers every rank's send into recv, rank i's part at element
// i*len(send) (torch's all_gather_into_tensor). len(recv) must be
// Size()*len(send). send may alias its own block of recv.
func (c *Comm) AllGather(ctx context.Context, send, recv any) error {
	return checked(c.allGather(send, recv)).exec(ctx)
}

// AllGatherAsync starts AllGather and returns at once.
func (c *Comm) AllGatherAsync(ctx context.Context, send, recv any) *Work {
	k, err := c.allGather(send, recv)
	return start(ctx, checked(k, err))
}

func (c *Comm) allGather(send, recv any) (*call, error) {
	const name = commslog.AllGatherIntoTensor
	sv, rv, err := c.checkScaled(name, send, recv, false)
	if err != nil {
		return nil, err
	}
	return c.allGatherv(name, sv, rv, equalCounts(c.Size(), sv.n), rv.bytes())
}

// allGatherv gathers sv into rv with per-rank counts.
func (c *Comm) allGatherv(name string, sv, rv view, counts []int, logBytes int) (*call, error) {
	a, fn := pick(c, algo.AllGather, rv.bytes(), "", allGatherAlgos)
	k := c.newCall(name, rv.dt, logBytes, a).agree(rv.n, 0, -1)
	p := c.peers(k, rv.dt, nil)
	c.delegate(k, sv.dev != nil || rv.dev != nil, backend.Call{Coll: backend.AllGather, Send: sv.b, Recv: rv.b, SendDev: sv.dev, RecvDev: rv.dev, DType: rv.dt, RecvCounts: counts})
	esz := rv.dt.Size()
	off := 0
	for _, n := range counts[:c.rank] {
		off += n * esz
	}
	if rv.dev != nil && sv.dev != nil {
		if err := c.sameDevice(name, sv, rv); err != nil {
			return nil, err
		}
		k.useDevice(rv.dev.Device())
		k.run = func(ctx context.Context) error {
			return c.onDevice(ctx, p, rv, 0, func(dp *devPeers, buf []byte) error {
				send, err := dp.Stand(sv.dev, 0, sv.bytes())
				if err != nil {
					return err
				}
				if err := dp.Copy(buf[off:off+sv.bytes()], send); err != nil {
					return err
				}
				if c.Size() > 1 && len(buf) > 0 {
					return fn(ctx, dp, buf, counts)
				}
				return nil
			})
		}
		return k, nil
	}
	k.run = func(ctx context.Context) error {
		s, err := c.stage(ctx, rv, false)
		if err != nil {
			return err
		}
		if err := c.load(ctx, s.host[off:off+sv.bytes()], sv); err != nil {
			c.unstage(ctx, s, false)
			return err
		}
		if c.Size() > 1 && len(s.host) > 0 {
			if err := fn(ctx, p, s.host, counts); err != nil {
				c.unstage(ctx, s, false)
				return err
			}
		}
		return c.unstage(ctx, s, true)
	}
	return k, nil
}

// AllGatherList gathers every rank's send into recv[i] (torch's
// all_gather). The parts may differ in length (allgatherv), but
// len(recv[Rank()]) must equal len(send) and every rank must pass the same
// lengths.
func (c *Comm) AllGatherList(ctx context.Context, send any, recv []any) error {
	const name = commslog.AllGather
	sv, err := c.check(name, "send", send)
	if err != nil {
		return err
	}
	if len(recv) != c.Size() {
		return invalid(name, c.rank, "recv has %d buffers, want %d", len(recv), c.Size())
	}
	rvs, total, err := c.checkList(name, "recv", recv)
	if err != nil {
		return err
	}
	if err := sameType(name, c, sv, rvs[0]); err != nil {
		return err
	}
	if rvs[c.rank].n != sv.n {
		return invalid(name, c.rank, "recv[%d] has %d elements but send has %d", c.rank, rvs[c.rank].n, sv.n)
	}
	counts := make([]int, len(rvs))
	for i, v := range rvs {
		counts[i] = v.n
	}
	flat := scratch.Get(total * sv.dt.Size())
	defer scratch.Put(flat)
	fv := view{dt: sv.dt, n: total, b: flat}
	if err := checked(c.allGatherv(name, sv, fv, counts, fv.bytes())).exec(ctx); err != nil {
		return err
	}
	return c.unpack(ctx, flat, rvs)
}

// copyTo writes src into v at byte offset off.
func (c *Comm) copyTo(ctx context.Context, v view, off int, src []byte) error {
	if v.dev != nil {
		return c.fromHost(ctx, v.dev, off, src)
	}
	copy(v.b[off:], src)
	return nil
}
