package goccl

import (
	"context"

	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/internal/devpath"
	"github.com/goccl/goccl/reduceop"
)

// StreamComm is a communicator whose collectives are ordered on a device
// stream a framework owns, as NCCL's are: each starts after the work
// queued on the stream before the call, and the work queued after the call
// waits for it, with no host wait on the stream:
//
//	producer kernel   (queued by the framework)
//	collective        sc.AllReduce(ctx, grads, reduceop.Avg)
//	consumer kernel   (queued by the framework right after the call)
//
// Each method returns at once with a Work. The collective waits on an
// event recorded on the stream at the call, and the stream is held
// (device.Stream.Hold) until the collective has finished, failed or not.
// Wait on the Work for its error: a failure (a peer lost, a timeout)
// releases the stream like a success does, so the consumer runs on
// whatever the buffer then holds and only the Work tells the two apart.
//
// Only the collectives of the device data path are offered, on device
// buffers of the stream's device.
type StreamComm struct {
	c *Comm
	s device.Stream
}

// OnStream returns c with its collectives ordered on s (for CUDA, a
// stream of the framework's, from cuda.WrapStream).
func (c *Comm) OnStream(s device.Stream) *StreamComm { return &StreamComm{c: c, s: s} }

// AllReduce is Comm.AllReduce ordered on the stream.
func (sc *StreamComm) AllReduce(ctx context.Context, buf DeviceBuffer, op reduceop.Op) *Work {
	k, err := sc.c.allReduce(commslog.AllReduce, buf, op, "")
	return sc.enqueue(ctx, k, err)
}

// Broadcast is Comm.Broadcast ordered on the stream.
func (sc *StreamComm) Broadcast(ctx context.Context, buf DeviceBuffer, root int) *Work {
	k, err := sc.c.broadcast(buf, root)
	return sc.enqueue(ctx, k, err)
}

// Reduce is Comm.Reduce ordered on the stream.
func (sc *StreamComm) Reduce(ctx context.Context, buf DeviceBuffer, op reduceop.Op, root int) *Work {
	k, err := sc.c.reduce(buf, op, root)
	return sc.enqueue(ctx, k, err)
}

// AllGather is Comm.AllGather ordered on the stream.
func (sc *StreamComm) AllGather(ctx context.Context, send, recv DeviceBuffer) *Work {
	k, err := sc.c.allGather(send, recv)
	return sc.enqueue(ctx, k, err)
}

// ReduceScatter is Comm.ReduceScatter ordered on the stream.
func (sc *StreamComm) ReduceScatter(ctx context.Context, send, recv DeviceBuffer, op reduceop.Op) *Work {
	k, err := sc.c.reduceScatter(send, recv, op)
	return sc.enqueue(ctx, k, err)
}

// enqueue places k on the stream: an event recorded now that the data
// path's streams wait on before k's first byte moves, and a hold that k
// releases when it ends.
func (sc *StreamComm) enqueue(ctx context.Context, k *call, err error) *Work {
	c := sc.c
	if err == nil && k.dev == nil {
		err = invalid(k.op, c.rank, "a collective on a stream takes device buffers")
	}
	if err == nil && sc.s == nil {
		err = invalid(k.op, c.rank, "nil stream")
	}
	if err == nil && k.bc != nil { // the backend enqueues it on s itself: no hold, no host wait
		issued := make(chan struct{})
		k.bc.Stream, k.bc.Issued = sc.s, issued
		w := start(ctx, k)
		select {
		case <-issued:
		case <-w.Done():
		}
		return w
	}
	var d *devpath.Ctx
	if err == nil {
		d, err = c.shared.devs.get(k.dev)
	}
	var ev device.Event
	if err == nil {
		ev, err = d.Event()
	}
	if err == nil {
		if err = sc.s.Record(ev); err != nil {
			err = invalid(k.op, c.rank, "stream: %v", err)
		}
	}
	var hold device.Hold
	if err == nil {
		if hold, err = sc.s.Hold(); err != nil {
			err = invalid(k.op, c.rank, "stream: %v", err)
		}
	}
	if err != nil {
		return start(ctx, checked(nil, err))
	}
	k.p.after = ev
	run := k.run // a device call: it has one
	k.run = func(ctx context.Context) error {
		err := run(ctx)
		if err == nil {
			d.PutEvent(ev) // the call's streams waited on it, and the call is done
		}
		return err
	}
	k.after = hold.Release
	return start(ctx, k)
}
