package goccl

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/reduceop"
)

// AllReduce reduces buf across all ranks with op and leaves the result in
// every rank's buf (torch.distributed.all_reduce). Avg divides the sum by
// Size once, at the end.
func (c *Comm) AllReduce(ctx context.Context, buf any, op reduceop.Op) error {
	return checked(c.allReduce(commslog.AllReduce, buf, op, "")).do(ctx)
}

// AllReduceAsync starts AllReduce and returns at once.
func (c *Comm) AllReduceAsync(ctx context.Context, buf any, op reduceop.Op) *Work {
	k, err := c.allReduce(commslog.AllReduce, buf, op, "")
	return start(ctx, checked(k, err))
}

// InferenceAllReduce is AllReduce on the latency-first path: it always
// takes the algorithm with the fewest message rounds (recursive doubling),
// whatever the size, as DeepSpeed's inference_all_reduce does for small
// activations.
func (c *Comm) InferenceAllReduce(ctx context.Context, buf any, op reduceop.Op) error {
	return checked(c.allReduce(commslog.InferenceAllReduce, buf, op, algo.Doubling)).exec(ctx)
}

// allReduce makes the call of an allreduce of buf. The view goes by
// pointer from here on: an 8-byte allreduce on the board passed it by
// value through four functions, and each copy read it in 16-byte words
// the previous one had just written in 8-byte words, which waits.
func (c *Comm) allReduce(name string, buf any, op reduceop.Op, force algo.Algorithm) (*call, error) {
	var v view
	if err := v.of(buf); err != nil {
		return nil, invalid(name, c.rank, "buf: %v", err)
	}
	return c.allReduceView(name, &v, op, force)
}

func (c *Comm) allReduceView(name string, v *view, op reduceop.Op, force algo.Algorithm) (*call, error) {
	if err := c.checkOp(name, op, v); err != nil {
		return nil, err
	}
	if v.dev == nil && c.useBoard(v.bytes(), force == "" || name == commslog.InferenceAllReduce) {
		return c.boardAllReduce(name, v, op), nil
	}
	a, fn := c.pickAllReduce(v.bytes(), force)
	if v.dev == nil {
		// Host memory: the call needs no closure (hostAllReduce runs it),
		// and a synchronous one goes back to the pool.
		k := c.newPooledCall(name, v.dt, v.bytes(), a).agree(v.n, op, -1)
		c.peers(k, v.dt, reducer(reduceop.Host{}, v.dt, op))
		k.arFn, k.arView = fn, *v
		if c.be != nil {
			c.delegate(k, false, backend.Call{Coll: backend.AllReduce, Send: v.b, Recv: v.b, DType: v.dt, Op: op})
		}
		return k, nil
	}
	k := c.newCall(name, v.dt, v.bytes(), a).agree(v.n, op, -1)
	p := c.peers(k, v.dt, reducer(reduceop.Host{}, v.dt, op))
	n, dv := c.Size(), *v // the closure keeps a copy: v stays on its caller's stack
	c.delegate(k, true, backend.Call{Coll: backend.AllReduce, SendDev: v.dev, RecvDev: v.dev, DType: v.dt, Op: op})
	k.useDevice(v.dev.Device())
	k.run = func(ctx context.Context) error {
		return c.onDevice(ctx, p, dv, op, func(dp *devPeers, buf []byte) error {
			if n > 1 && len(buf) > 0 {
				if err := fn(ctx, dp, buf); err != nil {
					return err
				}
			}
			if op == reduceop.Avg {
				return dp.Scale(buf, n)
			}
			return nil
		})
	}
	return k, nil
}

// hostAllReduce runs k, an allreduce of host memory over messages
// (allReduceView): k.arFn over the bytes of k.arView, with k.redop.
func (c *Comm) hostAllReduce(ctx context.Context, k *call) error {
	v, op, n := k.arView, k.redop, c.Size()
	s, err := c.stage(ctx, v, true)
	if err != nil {
		return err
	}
	if n > 1 && len(s.host) > 0 {
		if err := k.arFn(ctx, k.p, s.host); err != nil {
			c.unstage(ctx, s, false)
			return err
		}
	}
	if op == reduceop.Avg {
		if err := (reduceop.Host{}).Scale(v.dt, s.host, n); err != nil {
			c.unstage(ctx, s, false)
			return err
		}
	}
	return c.unstage(ctx, s, true)
}

// checkList resolves a list of buffers that must share one dtype and
// returns the total element count.
func (c *Comm) checkList(op, what string, bufs []any) ([]view, int, error) {
	views := make([]view, len(bufs))
	total := 0
	for i, b := range bufs {
		v, err := c.check(op, fmt.Sprintf("%s[%d]", what, i), b)
		if err != nil {
			return nil, 0, err
		}
		if i > 0 && v.dt != views[0].dt {
			return nil, 0, invalid(op, c.rank, "%s[%d] is %v but %s[0] is %v", what, i, v.dt, what, views[0].dt)
		}
		views[i] = v
		total += v.n
	}
	return views, total, nil
}

// pack copies each view into consecutive parts of flat.
func (c *Comm) pack(ctx context.Context, flat []byte, views []view) error {
	c.shared.packed.Add(int64(len(flat)))
	off := 0
	for _, v := range views {
		n := v.bytes()
		if err := c.load(ctx, flat[off:off+n], v); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// load copies v's bytes into dst, from the device where v lives there.
func (c *Comm) load(ctx context.Context, dst []byte, v view) error {
	if v.dev != nil {
		return c.toHost(ctx, dst, v.dev, 0)
	}
	copy(dst, v.b)
	return nil
}

// unpack is the inverse of pack.
func (c *Comm) unpack(ctx context.Context, flat []byte, views []view) error {
	c.shared.packed.Add(int64(len(flat)))
	off := 0
	for _, v := range views {
		n := v.bytes()
		if v.dev != nil {
			if err := c.fromHost(ctx, v.dev, 0, flat[off:off+n]); err != nil {
				return err
			}
		} else {
			copy(v.b, flat[off:off+n])
		}
		off += n
	}
	return nil
}
