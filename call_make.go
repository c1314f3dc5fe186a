package goccl

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/internal/clock"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/reduceop"
)

// What every collective shares: host staging of device buffers, the
// call's agreement (what the fingerprint checks) and the algo.Peers it
// runs on. Each collective has a file of its own (allreduce.go,
// broadcast.go, allgather.go, reducescatter.go, alltoall.go,
// gatherscatter.go, barrier.go, p2p.go); failure handling lives apart
// (call.go, abort_verdict.go, abort_blame.go, call_fingerprint.go, call_order.go, abort_leave.go,
// init_elastic.go).

// staged is a buffer argument as host bytes: the user's own memory for a
// Go slice, or pooled host memory for a DeviceBuffer.
type staged struct {
	view
	host []byte
}

// stage makes v's bytes addressable; with load, a device buffer is copied
// to host first. Only the collectives that do not run on the device data
// path (device_path.go) stage.
func (c *Comm) stage(ctx context.Context, v view, load bool) (staged, error) {
	if v.dev == nil {
		return staged{v, v.b}, nil
	}
	s := staged{v, scratch.Get(v.bytes())}
	if load && len(s.host) > 0 {
		if err := c.toHost(ctx, s.host, v.dev, 0); err != nil {
			scratch.Put(s.host)
			return staged{}, fmt.Errorf("copy device to host: %w", err)
		}
	}
	return s, nil
}

// unstage copies a device buffer's result back (with store) and frees the
// staging memory.
func (c *Comm) unstage(ctx context.Context, s staged, store bool) error {
	if s.dev == nil {
		return nil
	}
	defer scratch.Put(s.host)
	if store && len(s.host) > 0 {
		if err := c.fromHost(ctx, s.dev, 0, s.host); err != nil {
			return fmt.Errorf("copy host to device: %w", err)
		}
	}
	return nil
}

// toHost copies len(dst) bytes of a device buffer from byte off into dst
// and waits.
func (c *Comm) toHost(ctx context.Context, dst []byte, b DeviceBuffer, off int) error {
	d, err := c.shared.devs.get(b.Device())
	if err != nil {
		return err
	}
	return d.ToHost(ctx, dst, b, off)
}

// fromHost copies src into a device buffer from byte off and waits.
func (c *Comm) fromHost(ctx context.Context, b DeviceBuffer, off int, src []byte) error {
	d, err := c.shared.devs.get(b.Device())
	if err != nil {
		return err
	}
	return d.FromHost(ctx, b, off, src)
}

// check resolves a buffer argument for op.
func (c *Comm) check(op string, what string, buf any) (view, error) {
	v, err := viewOf(buf)
	if err != nil {
		return v, invalid(op, c.rank, "%s: %v", what, err)
	}
	return v, nil
}

func (c *Comm) checkRoot(op string, root int) error {
	if root < 0 || root >= c.Size() {
		return invalid(op, c.rank, "root %d out of range [0,%d)", root, c.Size())
	}
	return nil
}

// checkOp checks that v's dtype takes rop, and for a DeviceBuffer that the
// device has a kernel for it (device.CheckReduce): the device path reduces
// on the device, and the kernels cover fewer dtypes than the host does.
func (c *Comm) checkOp(op string, rop reduceop.Op, v *view) error {
	check := reduceop.Check
	if v.dev != nil {
		check = device.CheckReduce
	}
	if err := check(rop, v.dt); err != nil {
		return invalid(op, c.rank, "%v", err)
	}
	return nil
}

func sameType(op string, c *Comm, a, b view) error {
	if a.dt != b.dt {
		return invalid(op, c.rank, "send is %v but recv is %v", a.dt, b.dt)
	}
	return nil
}

// checkPair resolves a send and a recv buffer of one dtype.
func (c *Comm) checkPair(op string, send, recv any) (sv, rv view, err error) {
	if sv, err = c.check(op, "send", send); err != nil {
		return
	}
	if rv, err = c.check(op, "recv", recv); err != nil {
		return
	}
	err = sameType(op, c, sv, rv)
	return
}

// checkScaled is checkPair for collectives whose bigger buffer holds
// Size() blocks of the smaller one (allgather, reduce-scatter, gather,
// scatter). sendBig says which side is the bigger.
func (c *Comm) checkScaled(op string, send, recv any, sendBig bool) (sv, rv view, err error) {
	if sv, rv, err = c.checkPair(op, send, recv); err != nil {
		return
	}
	small, big, smallName, bigName := sv, rv, "send", "recv"
	if sendBig {
		small, big, smallName, bigName = rv, sv, "recv", "send"
	}
	if big.n != small.n*c.Size() {
		err = invalid(op, c.rank, "%s has %d elements, want %d (size %d x %s %d)",
			bigName, big.n, small.n*c.Size(), c.Size(), smallName, small.n)
	}
	return
}

func (c *Comm) newCall(op string, dt reduceop.DType, bytes int, a algo.Algorithm) *call {
	k := new(call)
	k.c, k.op, k.dt, k.bytes, k.algo, k.root = c, op, dt, int64(bytes), string(a), -1
	return k
}

// agree sets what the fingerprint makes every rank agree on.
func (k *call) agree(count int, redop reduceop.Op, root int) *call {
	k.count, k.redop, k.root = int64(count), redop, root
	k.silent = count == 0
	return k
}

// peers returns the algo.Peers a call runs on. Its tag, which fixes the
// call's order among collectives, is taken when the call starts (take).
func (c *Comm) peers(k *call, dt reduceop.DType, reduce func(dst, src []byte) error) *peers {
	p := &k.own // zero: k is new, or came zeroed from callPool
	p.c, p.op, p.elem, p.reduce, p.check = c, k.op, dt.Size(), reduce, !c.opts.noCheck
	k.p = p
	return k.p
}

// take orders the call: its tag, and the fingerprint that carries it.
// exec calls it for a call made in place, start for an async one (so the
// order is the order of the calls), once.
func (k *call) take(async, started bool) {
	p := k.p
	if p == nil || p.tag != 0 {
		return
	}
	c := k.c
	sh := c.shared
	// What the flight recorder takes beside the call's own fields, read
	// before the lock: the callers, and the time an async call is issued
	// (one made in place that is about to run is recorded as started at
	// once, at the time exec stamped: none yet for a board call, which
	// learns it later).
	var pcs [6]uintptr
	var now clock.Stamp
	if sh.flight != nil {
		sh.flight.Callers(1, &pcs) // take's caller: exec or start
		switch {
		case async:
			now = clock.Now()
		case started:
			now = k.started
		}
	}
	sh.calls.Lock()
	k.prev = c.orderLocked(k)
	if k.bc != nil {
		k.bc.Order = c.be.Next() // the backend issues its calls in this order
	}
	k.issueLocked(now, !async && started, &pcs)
	sh.calls.Unlock()
	if c.board != nil && !k.onBoard {
		c.board.announce(uint64(p.tag)&(tagP2P-1), &p.fp)
	}
}

func equalCounts(n, each int) []int {
	counts := make([]int, n)
	for i := range counts {
		counts[i] = each
	}
	return counts
}
