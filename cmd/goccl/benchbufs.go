package main

import (
	"context"
	"reflect"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/internal/elems"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

// benchBufs holds one rank's buffers for one size and knows how to run the
// collective and check its result against a sequential reference.
type benchBufs struct {
	cfg        *benchConfig
	rank, n    int
	count      int // elements in the whole message
	send, recv any
	state      *onebit.State // -op onebit's error-feedback buffers
	parts      []any         // with -parts: send cut into slices (AllReduceCoalesced)

	// With -device: the collective runs on these device buffers; send and
	// recv above are their host copies, for filling and -check
	// (benchdev.go).
	dev          *benchDevice
	dsend, drecv device.Buffer
	dstate       *onebit.DeviceState
}

func sliceLen(buf any) int {
	v, _ := goccl.BufferLen(buf)
	return v
}

// input is rank r's element i: small integers, exact in every dtype, so
// that any reduction order gives the same answer.
func (b *benchBufs) input(r, i int) float64 {
	if b.cfg.redop == reduceop.Prod {
		return float64(1 + (r+i)%2)
	}
	return float64((r + i) % 5)
}

func newBenchBufs(cfg *benchConfig, rank, n, count int) *benchBufs {
	b := &benchBufs{cfg: cfg, rank: rank, n: n, count: count}
	dt := cfg.dtype
	m := count / n // block per rank for blocked collectives
	switch cfg.op {
	case "onebit":
		b.send = elems.Make(dt, count)
		var err error
		if b.state, err = onebit.NewState(count, n); err != nil {
			panic(err) // count and n were checked by the flags
		}
	case "allreduce", "broadcast", "reduce", "sendrecv":
		b.send = elems.Make(dt, count)
		if cfg.op == "sendrecv" {
			b.recv = elems.Make(dt, count)
		}
	case "allgather":
		b.send, b.recv = elems.Make(dt, m), elems.Make(dt, count)
	case "reducescatter":
		b.send, b.recv = elems.Make(dt, count), elems.Make(dt, m)
	case "alltoall":
		b.send, b.recv = elems.Make(dt, count), elems.Make(dt, count)
	case "gather":
		b.send = elems.Make(dt, m)
		if rank == cfg.root {
			b.recv = elems.Make(dt, count)
		}
	case "scatter":
		if rank == cfg.root {
			b.send = elems.Make(dt, count)
		}
		b.recv = elems.Make(dt, m)
	}
	b.fill()
	if cfg.parts > 1 {
		b.parts = cut(b.send, cfg.parts)
	}
	return b
}

// cut returns buf (a slice) as k slices of it, of sizes that differ by
// at most one element.
func cut(buf any, k int) []any {
	v := reflect.ValueOf(buf)
	parts := make([]any, k)
	lo := 0
	for i, m := range algo.EvenCounts(v.Len(), k) {
		parts[i] = v.Slice(lo, lo+m).Interface()
		lo += m
	}
	return parts
}

// reset refills the inputs (the in-place collectives overwrite them), on
// the device too with -device.
func (b *benchBufs) reset(ctx context.Context) error {
	benchEvent(b.rank, "refill")
	b.fill()
	if b.dev == nil || b.dsend == nil {
		return nil
	}
	return b.dev.upload(ctx, b.dsend, b.send)
}

func (b *benchBufs) fill() {
	if b.send == nil {
		return
	}
	for i, n := 0, sliceLen(b.send); i < n; i++ {
		v := b.input(b.rank, i)
		if b.cfg.op == "broadcast" && b.rank != b.cfg.root {
			v = 99 // poison: must be overwritten
		}
		elems.Set(b.send, i, v)
	}
}

// reduced folds element i of every rank's input with the sequential
// reference: reduceop.Apply in rank order, then Avg's scale.
func (b *benchBufs) reduced(idx []int) any {
	dt, op := b.cfg.dtype, b.cfg.redop
	acc := elems.Make(dt, len(idx))
	tmp := elems.Make(dt, len(idx))
	for r := 0; r < b.n; r++ {
		dst := acc
		if r > 0 {
			dst = tmp
		}
		for k, i := range idx {
			elems.Set(dst, k, b.input(r, i))
		}
		if r > 0 {
			sumOp := op
			if op == reduceop.Avg {
				sumOp = reduceop.Sum
			}
			reduceop.Apply(dt, sumOp, goccl.Bytes(acc), goccl.Bytes(tmp))
		}
	}
	if op == reduceop.Avg {
		reduceop.Scale(dt, goccl.Bytes(acc), b.n)
	}
	return acc
}

// expected is this rank's result as the sequential reference computes it,
// or nil where this rank receives nothing.
func (b *benchBufs) expected() any {
	dt, n, m := b.cfg.dtype, b.n, b.count/b.n
	fill := func(cnt int, f func(i int) float64) any {
		s := elems.Make(dt, cnt)
		for i := 0; i < cnt; i++ {
			elems.Set(s, i, f(i))
		}
		return s
	}
	seq := func(lo, cnt int) []int {
		idx := make([]int, cnt)
		for i := range idx {
			idx[i] = lo + i
		}
		return idx
	}
	switch b.cfg.op {
	case "allreduce":
		return b.reduced(seq(0, b.count))
	case "reduce":
		if b.rank == b.cfg.root {
			return b.reduced(seq(0, b.count))
		}
	case "reducescatter":
		return b.reduced(seq(b.rank*m, m))
	case "broadcast":
		return fill(b.count, func(i int) float64 { return b.input(b.cfg.root, i) })
	case "allgather":
		return fill(b.count, func(i int) float64 { return b.input(i/m, i%m) })
	case "gather":
		if b.rank == b.cfg.root {
			return fill(b.count, func(i int) float64 { return b.input(i/m, i%m) })
		}
	case "scatter":
		return fill(m, func(i int) float64 { return b.input(b.cfg.root, b.rank*m+i) })
	case "alltoall":
		return fill(b.count, func(i int) float64 { return b.input(i/m, b.rank*m+i%m) })
	case "sendrecv":
		return fill(b.count, func(i int) float64 { return b.input((b.rank+n-1)%n, i) })
	}
	return nil
}

// result is the buffer that holds this rank's answer.
func (b *benchBufs) result() any {
	if b.inPlace() {
		return b.send
	}
	return b.recv
}

// inPlace reports whether the collective leaves its answer in send.
func (b *benchBufs) inPlace() bool {
	switch b.cfg.op {
	case "allreduce", "broadcast", "reduce", "onebit":
		return true
	}
	return false
}

// backend names the library the collective runs on (Comm.BackendOn): on
// the buffers it is given, so that a device run under NCCL says "nccl",
// and a dtype or op the backend leaves to goccl says so.
func (b *benchBufs) backend(c *goccl.Comm) string {
	send, recv := b.args()
	if b.inPlace() || recv == nil {
		recv = send
	}
	return c.BackendOn(benchOps[b.cfg.op].coll, recv, b.cfg.redop)
}

// wrong counts the elements of this rank's result that differ from the
// sequential reference. The reference is computed here, after the timed
// calls, so that -check allocates nothing before them that the garbage
// collector could be busy with while they run.
func (b *benchBufs) wrong(ctx context.Context) (int64, error) {
	benchEvent(b.rank, "check")
	want := b.expected()
	if want == nil {
		return 0, nil
	}
	got := b.result()
	if b.dev != nil {
		d := b.drecv
		if b.inPlace() {
			d = b.dsend
		}
		if err := b.dev.download(ctx, got, d); err != nil {
			return 0, err
		}
	}
	var bad int64
	for i, n := 0, sliceLen(want); i < n; i++ {
		if elems.Get(got, i) != elems.Get(want, i) {
			bad++
		}
	}
	return bad, nil
}

func (b *benchBufs) run(ctx context.Context, c *goccl.Comm) error {
	benchEvent(b.rank, "call")
	cfg := b.cfg
	send, recv := b.args()
	switch cfg.op {
	case "allreduce":
		if b.parts != nil {
			return c.AllReduceCoalesced(ctx, b.parts, cfg.redop)
		}
		return c.AllReduce(ctx, send, cfg.redop)
	case "broadcast":
		return c.Broadcast(ctx, send, cfg.root)
	case "reduce":
		return c.Reduce(ctx, send, cfg.redop, cfg.root)
	case "allgather":
		return c.AllGather(ctx, send, recv)
	case "reducescatter":
		return c.ReduceScatter(ctx, send, recv, cfg.redop)
	case "alltoall":
		return c.AllToAll(ctx, send, recv)
	case "gather":
		return c.Gather(ctx, send, recv, cfg.root)
	case "scatter":
		return c.Scatter(ctx, send, recv, cfg.root)
	case "onebit":
		if b.dev != nil {
			// The last step, the decompression, is queued on the stream:
			// the call is done when the stream is.
			if err := onebit.CompressedAllReduceOn(ctx, c, b.dev.s, b.dsend, b.dstate); err != nil {
				return err
			}
			return b.dev.s.Synchronize(ctx)
		}
		return onebit.CompressedAllReduce(ctx, c, b.send.([]float32), b.state)
	case "sendrecv":
		// Every rank sends to the next and receives from the previous.
		next, prev := (b.rank+1)%b.n, (b.rank+b.n-1)%b.n
		r := c.RecvAsync(ctx, recv, prev, 0)
		if err := c.Send(ctx, send, next, 0); err != nil {
			return err
		}
		return r.Wait(ctx)
	}
	return nil
}
