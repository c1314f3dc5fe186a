package goccl

import (
	"context"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/reduceop"
)

// Broadcast copies root's buf into every rank's buf.
func (c *Comm) Broadcast(ctx context.Context, buf any, root int) error {
	return checked(c.broadcast(buf, root)).exec(ctx)
}

// BroadcastAsync starts Broadcast and returns at once.
func (c *Comm) BroadcastAsync(ctx context.Context, buf any, root int) *Work {
	k, err := c.broadcast(buf, root)
	return start(ctx, checked(k, err))
}

func (c *Comm) broadcast(buf any, root int) (*call, error) {
	const name = commslog.Broadcast
	v, err := c.check(name, "buf", buf)
	if err != nil {
		return nil, err
	}
	if err := c.checkRoot(name, root); err != nil {
		return nil, err
	}
	a, fn := pick(c, algo.Broadcast, v.bytes(), "", broadcastAlgos)
	k := c.newCall(name, v.dt, v.bytes(), a).agree(v.n, 0, root)
	p := c.peers(k, v.dt, nil)
	c.delegate(k, v.dev != nil, backend.Call{Coll: backend.Broadcast, Send: v.b, Recv: v.b, SendDev: v.dev, RecvDev: v.dev, DType: v.dt, Root: root})
	isRoot := c.rank == root
	if v.dev != nil {
		k.useDevice(v.dev.Device())
		k.run = func(ctx context.Context) error {
			return c.onDevice(ctx, p, v, 0, func(dp *devPeers, buf []byte) error {
				if c.Size() > 1 && len(buf) > 0 {
					return fn(ctx, dp, buf, root)
				}
				return nil
			})
		}
		return k, nil
	}
	k.run = func(ctx context.Context) error {
		s, err := c.stage(ctx, v, isRoot)
		if err != nil {
			return err
		}
		if c.Size() > 1 && len(s.host) > 0 {
			if err := fn(ctx, p, s.host, root); err != nil {
				c.unstage(ctx, s, false)
				return err
			}
		}
		return c.unstage(ctx, s, !isRoot)
	}
	return k, nil
}

// Reduce reduces buf across ranks with op into root's buf. Other ranks'
// buf is left unchanged.
func (c *Comm) Reduce(ctx context.Context, buf any, op reduceop.Op, root int) error {
	return checked(c.reduce(buf, op, root)).exec(ctx)
}

// ReduceAsync starts Reduce and returns at once.
func (c *Comm) ReduceAsync(ctx context.Context, buf any, op reduceop.Op, root int) *Work {
	k, err := c.reduce(buf, op, root)
	return start(ctx, checked(k, err))
}

func (c *Comm) reduce(buf any, op reduceop.Op, root int) (*call, error) {
	const name = commslog.Reduce
	v, err := c.check(name, "buf", buf)
	if err != nil {
		return nil, err
	}
	if err := c.checkRoot(name, root); err != nil {
		return nil, err
	}
	if err := c.checkOp(name, op, &v); err != nil {
		return nil, err
	}
	a, fn := pick(c, algo.Reduce, v.bytes(), "", reduceAlgos)
	k := c.newCall(name, v.dt, v.bytes(), a).agree(v.n, op, root)
	p := c.peers(k, v.dt, reducer(reduceop.Host{}, v.dt, op))
	c.delegate(k, v.dev != nil, backend.Call{Coll: backend.Reduce, Send: v.b, Recv: v.b, SendDev: v.dev, RecvDev: v.dev, DType: v.dt, Op: op, Root: root})
	isRoot := c.rank == root
	if v.dev != nil {
		k.useDevice(v.dev.Device())
		k.run = func(ctx context.Context) error {
			return c.onDevice(ctx, p, v, op, func(dp *devPeers, buf []byte) error {
				if c.Size() == 1 || len(buf) == 0 {
					return nil // Avg over one rank divides by 1
				}
				if isRoot {
					if err := fn(ctx, dp, buf, root); err != nil {
						return err
					}
					if op == reduceop.Avg {
						return dp.Scale(buf, c.Size())
					}
					return nil
				}
				// As on the host: a non-root works on a copy.
				work := dp.GetScratch(len(buf))
				if err := dp.Copy(work, buf); err != nil {
					return err
				}
				if err := fn(ctx, dp, work, root); err != nil {
					return err
				}
				dp.PutScratch(work)
				return nil
			})
		}
		return k, nil
	}
	k.run = func(ctx context.Context) error {
		// The algorithm uses a non-root's buffer as scratch, so non-roots
		// work on a copy.
		var host []byte
		var s staged
		if isRoot {
			var err error
			if s, err = c.stage(ctx, v, true); err != nil {
				return err
			}
			host = s.host
		} else {
			host = scratch.Get(v.bytes())
			defer scratch.Put(host)
			if err := c.load(ctx, host, v); err != nil {
				return err
			}
		}
		if c.Size() > 1 && len(host) > 0 {
			if err := fn(ctx, p, host, root); err != nil {
				c.unstage(ctx, s, false)
				return err
			}
		}
		if !isRoot {
			return nil
		}
		if op == reduceop.Avg {
			if err := (reduceop.Host{}).Scale(v.dt, host, c.Size()); err != nil {
				c.unstage(ctx, s, false)
				return err
			}
		}
		return c.unstage(ctx, s, true)
	}
	return k, nil
}
