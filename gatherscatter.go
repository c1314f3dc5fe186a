package goccl

import (
	"context"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
)

// Gather collects every rank's send into root's recv, rank i's part at
// element i*len(send). recv is only used on root (others may pass nil of
// the right type, or anything: it is not read).
func (c *Comm) Gather(ctx context.Context, send, recv any, root int) error {
	const name = commslog.Gather
	if err := c.checkRoot(name, root); err != nil {
		return err
	}
	n := c.Size()
	var sv, rv view
	var err error
	if c.rank == root {
		sv, rv, err = c.checkScaled(name, send, recv, false)
	} else {
		sv, err = c.check(name, "send", send) // recv is not used
	}
	if err != nil {
		return err
	}
	a, fn := pick(c, algo.Gather, sv.bytes()*n, "", gatherAlgos)
	k := c.newCall(name, sv.dt, sv.bytes()*n, a).agree(sv.n, 0, root)
	p := c.peers(k, sv.dt, nil)
	c.delegate(k, sv.dev != nil || rv.dev != nil, backend.Call{Coll: backend.Gather, Send: sv.b, Recv: rv.b, SendDev: sv.dev, RecvDev: rv.dev, DType: sv.dt, Root: root})
	counts := equalCounts(n, sv.n)
	if sv.dev != nil && (c.rank != root || rv.dev != nil) {
		if c.rank == root {
			if err := c.sameDevice(name, sv, rv); err != nil {
				return err
			}
		}
		k.useDevice(sv.dev.Device())
		sb := sv.bytes()
		k.run = func(ctx context.Context) error {
			if c.rank != root {
				// The algorithm gathers subtrees into a buffer of all
				// blocks: device scratch, this rank's block first.
				return c.onDevice(ctx, p, sv, 0, func(dp *devPeers, send []byte) error {
					all := dp.GetScratch(sb * n)
					if err := dp.Copy(all[c.rank*sb:(c.rank+1)*sb], send); err != nil {
						return err
					}
					if n > 1 && len(all) > 0 {
						if err := fn(ctx, dp, all, counts, root); err != nil {
							return err
						}
					}
					dp.PutScratch(all)
					return nil
				})
			}
			return c.onDevice(ctx, p, rv, 0, func(dp *devPeers, recv []byte) error {
				send, err := dp.Stand(sv.dev, 0, sb)
				if err != nil {
					return err
				}
				if err := dp.Copy(recv[c.rank*sb:(c.rank+1)*sb], send); err != nil {
					return err
				}
				if n > 1 && len(recv) > 0 {
					return fn(ctx, dp, recv, counts, root)
				}
				return nil
			})
		}
		return k.exec(ctx)
	}
	k.run = func(ctx context.Context) error {
		var s staged
		var host []byte
		if c.rank == root {
			var err error
			if s, err = c.stage(ctx, rv, false); err != nil {
				return err
			}
			host = s.host
		} else {
			host = scratch.Get(sv.bytes() * n)
			defer scratch.Put(host)
		}
		if err := c.load(ctx, host[c.rank*sv.bytes():(c.rank+1)*sv.bytes()], sv); err != nil {
			c.unstage(ctx, s, false)
			return err
		}
		if n > 1 && len(host) > 0 {
			if err := fn(ctx, p, host, counts, root); err != nil {
				c.unstage(ctx, s, false)
				return err
			}
		}
		return c.unstage(ctx, s, c.rank == root)
	}
	return k.exec(ctx)
}

// Scatter sends block i of root's send (len(send) = Size()*len(recv)) to
// rank i's recv. send is only read on root.
func (c *Comm) Scatter(ctx context.Context, send, recv any, root int) error {
	const name = commslog.Scatter
	if err := c.checkRoot(name, root); err != nil {
		return err
	}
	n := c.Size()
	var sv, rv view
	var err error
	if c.rank == root {
		sv, rv, err = c.checkScaled(name, send, recv, true)
	} else {
		rv, err = c.check(name, "recv", recv) // send is not used
	}
	if err != nil {
		return err
	}
	a, fn := pick(c, algo.Scatter, rv.bytes()*n, "", scatterAlgos)
	k := c.newCall(name, rv.dt, rv.bytes()*n, a).agree(rv.n, 0, root)
	p := c.peers(k, rv.dt, nil)
	c.delegate(k, sv.dev != nil || rv.dev != nil, backend.Call{Coll: backend.Scatter, Send: sv.b, Recv: rv.b, SendDev: sv.dev, RecvDev: rv.dev, DType: rv.dt, Root: root})
	counts := equalCounts(n, rv.n)
	if rv.dev != nil && (c.rank != root || sv.dev != nil) {
		if c.rank == root {
			if err := c.sameDevice(name, sv, rv); err != nil {
				return err
			}
		}
		k.useDevice(rv.dev.Device())
		rb := rv.bytes()
		k.run = func(ctx context.Context) error {
			if c.rank == root { // the algorithm only reads root's buffer
				return c.onDevice(ctx, p, sv, 0, func(dp *devPeers, send []byte) error {
					if n > 1 && len(send) > 0 {
						if err := fn(ctx, dp, send, counts, root); err != nil {
							return err
						}
					}
					recv, err := dp.Stand(rv.dev, 0, rb)
					if err != nil {
						return err
					}
					return dp.Copy(recv, send[c.rank*rb:(c.rank+1)*rb])
				})
			}
			return c.onDevice(ctx, p, rv, 0, func(dp *devPeers, recv []byte) error {
				all := dp.GetScratch(rb * n)
				if n > 1 && len(all) > 0 {
					if err := fn(ctx, dp, all, counts, root); err != nil {
						return err
					}
				}
				if err := dp.Copy(recv, all[c.rank*rb:(c.rank+1)*rb]); err != nil {
					return err
				}
				dp.PutScratch(all)
				return nil
			})
		}
		return k.exec(ctx)
	}
	k.run = func(ctx context.Context) error {
		var host []byte
		if c.rank == root && sv.dev == nil {
			host = sv.b // the algorithm only reads root's buffer
		} else {
			host = scratch.Get(rv.bytes() * n)
			defer scratch.Put(host)
			if c.rank == root {
				if err := c.load(ctx, host, sv); err != nil {
					return err
				}
			}
		}
		if n > 1 && len(host) > 0 {
			if err := fn(ctx, p, host, counts, root); err != nil {
				return err
			}
		}
		return c.copyTo(ctx, rv, 0, host[c.rank*rv.bytes():(c.rank+1)*rv.bytes()])
	}
	return k.exec(ctx)
}
