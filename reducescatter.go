package goccl

import (
	"context"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/reduceop"
)

// ReduceScatter reduces send across ranks with op and leaves block Rank()
// of the result in recv (torch's reduce_scatter_tensor). len(send) must be
// Size()*len(recv).
func (c *Comm) ReduceScatter(ctx context.Context, send, recv any, op reduceop.Op) error {
	return checked(c.reduceScatter(send, recv, op)).exec(ctx)
}

// ReduceScatterAsync starts ReduceScatter and returns at once.
func (c *Comm) ReduceScatterAsync(ctx context.Context, send, recv any, op reduceop.Op) *Work {
	k, err := c.reduceScatter(send, recv, op)
	return start(ctx, checked(k, err))
}

func (c *Comm) reduceScatter(send, recv any, op reduceop.Op) (*call, error) {
	const name = commslog.ReduceScatterTensor
	sv, rv, err := c.checkScaled(name, send, recv, true)
	if err != nil {
		return nil, err
	}
	if err := c.checkOp(name, op, &sv); err != nil {
		return nil, err
	}
	return c.reduceScatterv(name, []view{sv}, rv, equalCounts(c.Size(), rv.n), op)
}

// reduceScatterv reduces the concatenation of parts with per-rank counts
// and leaves this rank's block in rv.
func (c *Comm) reduceScatterv(name string, parts []view, rv view, counts []int, op reduceop.Op) (*call, error) {
	total := 0
	for _, n := range counts {
		total += n
	}
	esz := rv.dt.Size()
	a, fn := pick(c, algo.ReduceScatter, total*esz, "", reduceScatterAlgos)
	k := c.newCall(name, rv.dt, total*esz, a).agree(total, op, -1)
	kern := reduceop.Host{}
	p := c.peers(k, rv.dt, reducer(kern, rv.dt, op))
	if len(parts) == 1 {
		c.delegate(k, parts[0].dev != nil || rv.dev != nil, backend.Call{Coll: backend.ReduceScatter, Send: parts[0].b, Recv: rv.b, SendDev: parts[0].dev, RecvDev: rv.dev, DType: rv.dt, Op: op, RecvCounts: counts})
	}
	off := 0
	for _, n := range counts[:c.rank] {
		off += n * esz
	}
	if len(parts) == 1 && parts[0].dev != nil && rv.dev != nil {
		if err := c.sameDevice(name, parts[0], rv); err != nil {
			return nil, err
		}
		k.useDevice(rv.dev.Device())
		sv := parts[0]
		k.run = func(ctx context.Context) error {
			return c.onDevice(ctx, p, rv, op, func(dp *devPeers, recv []byte) error {
				send, err := dp.Stand(sv.dev, 0, sv.bytes())
				if err != nil {
					return err
				}
				// The algorithm overwrites its buffer: it works on a copy.
				work := dp.GetScratch(len(send))
				if err := dp.Copy(work, send); err != nil {
					return err
				}
				if c.Size() > 1 && len(work) > 0 {
					if err := fn(ctx, dp, work, counts); err != nil {
						return err
					}
				}
				mine := work[off : off+rv.bytes()]
				if op == reduceop.Avg {
					if err := dp.Scale(mine, c.Size()); err != nil {
						return err
					}
				}
				if err := dp.Copy(recv, mine); err != nil {
					return err
				}
				dp.PutScratch(work)
				return nil
			})
		}
		return k, nil
	}
	k.run = func(ctx context.Context) error {
		work := scratch.Get(total * esz)
		defer scratch.Put(work)
		if err := c.pack(ctx, work, parts); err != nil {
			return err
		}
		if c.Size() > 1 && len(work) > 0 {
			if err := fn(ctx, p, work, counts); err != nil {
				return err
			}
		}
		mine := work[off : off+rv.bytes()]
		if op == reduceop.Avg {
			if err := kern.Scale(rv.dt, mine, c.Size()); err != nil {
				return err
			}
		}
		return c.copyTo(ctx, rv, 0, mine)
	}
	return k, nil
}

// ReduceScatterList reduces send across ranks, send[i] being the part
// that rank i receives reduced in recv (torch's reduce_scatter). Parts may
// differ in length, but len(recv) must equal len(send[Rank()]).
func (c *Comm) ReduceScatterList(ctx context.Context, send []any, recv any, op reduceop.Op) error {
	const name = commslog.ReduceScatter
	if len(send) != c.Size() {
		return invalid(name, c.rank, "send has %d buffers, want %d", len(send), c.Size())
	}
	svs, _, err := c.checkList(name, "send", send)
	if err != nil {
		return err
	}
	rv, err := c.check(name, "recv", recv)
	if err != nil {
		return err
	}
	if err := sameType(name, c, svs[0], rv); err != nil {
		return err
	}
	if rv.n != svs[c.rank].n {
		return invalid(name, c.rank, "recv has %d elements but send[%d] has %d", rv.n, c.rank, svs[c.rank].n)
	}
	if err := c.checkOp(name, op, &rv); err != nil {
		return err
	}
	counts := make([]int, len(svs))
	for i, v := range svs {
		counts[i] = v.n
	}
	return checked(c.reduceScatterv(name, svs, rv, counts, op)).exec(ctx)
}
