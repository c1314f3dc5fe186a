package onebit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goccl/goccl/reduceop"
)

// fakeWorld is an in-process world of n ranks for tests: goroutines as ranks,
// one buffered channel per ordered pair of ranks. Every collective sends one
// message to every peer and then receives one from every peer, so per-pair
// FIFO order keeps consecutive collectives apart. It counts the bytes each
// rank sends, modelling AllGather as p-1 copies of send leaving the rank (ring
// or direct), AllToAll as the p-1 blocks for others, and AllReduce as a ring,
// 2(p-1)/p of the buffer.
type fakeWorld struct {
	n    int
	ch   [][]chan any // ch[from][to]
	sent []atomic.Int64
}

type fakeComm struct {
	w    *fakeWorld
	rank int
}

var _ Comm = (*fakeComm)(nil)

func newFakeWorld(n int) *fakeWorld {
	w := &fakeWorld{n: n, ch: make([][]chan any, n), sent: make([]atomic.Int64, n)}
	for i := range w.ch {
		w.ch[i] = make([]chan any, n)
		for j := range w.ch[i] {
			w.ch[i][j] = make(chan any, 64)
		}
	}
	return w
}

func (w *fakeWorld) comm(r int) *fakeComm { return &fakeComm{w: w, rank: r} }

// run runs f on every rank concurrently and returns the first error.
func (w *fakeWorld) run(f func(c *fakeComm) error) error {
	errs := make([]error, w.n)
	var wg sync.WaitGroup
	for r := range w.n {
		wg.Go(func() { errs[r] = f(w.comm(r)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *fakeComm) Rank() int { return c.rank }
func (c *fakeComm) Size() int { return c.w.n }

func (c *fakeComm) send(ctx context.Context, to int, v any) error {
	select {
	case c.w.ch[c.rank][to] <- v:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fake: rank %d -> peer %d: %w", c.rank, to, ctx.Err())
	}
}

func (c *fakeComm) recv(ctx context.Context, from int) (any, error) {
	select {
	case v := <-c.w.ch[from][c.rank]:
		return v, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("fake: rank %d <- peer %d: %w", c.rank, from, ctx.Err())
	}
}

// block returns elements [lo,hi) of a typed slice, copied.
func block(v any, lo, hi int) (any, int, error) {
	switch s := v.(type) {
	case []uint8:
		return append([]uint8(nil), s[lo:hi]...), hi - lo, nil
	case []float32:
		return append([]float32(nil), s[lo:hi]...), 4 * (hi - lo), nil
	}
	return nil, 0, fmt.Errorf("fake: unsupported type %T", v)
}

func length(v any) int {
	switch s := v.(type) {
	case []uint8:
		return len(s)
	case []float32:
		return len(s)
	}
	return -1
}

func put(dst any, off int, src any) error {
	switch d := dst.(type) {
	case []uint8:
		copy(d[off:], src.([]uint8))
	case []float32:
		copy(d[off:], src.([]float32))
	default:
		return fmt.Errorf("fake: unsupported type %T", dst)
	}
	return nil
}

func (c *fakeComm) AllToAll(ctx context.Context, send, recv any) error {
	p := c.w.n
	if length(send) < 0 || length(send) != length(recv) || length(send)%p != 0 {
		return fmt.Errorf("fake: alltoall: bad buffers %T[%d] %T[%d]", send, length(send), recv, length(recv))
	}
	bs := length(send) / p
	for j := range p {
		b, nb, err := block(send, j*bs, (j+1)*bs)
		if err != nil {
			return err
		}
		if j != c.rank {
			c.w.sent[c.rank].Add(int64(nb))
		}
		if err := c.send(ctx, j, b); err != nil {
			return err
		}
	}
	for j := range p {
		b, err := c.recv(ctx, j)
		if err != nil {
			return err
		}
		if err := put(recv, j*bs, b); err != nil {
			return err
		}
	}
	return nil
}

func (c *fakeComm) AllGather(ctx context.Context, send, recv any) error {
	p := c.w.n
	ls := length(send)
	if ls < 0 || length(recv) != p*ls {
		return fmt.Errorf("fake: allgather: bad buffers %T[%d] %T[%d]", send, ls, recv, length(recv))
	}
	for j := range p {
		b, nb, err := block(send, 0, ls)
		if err != nil {
			return err
		}
		if j != c.rank {
			c.w.sent[c.rank].Add(int64(nb))
		}
		if err := c.send(ctx, j, b); err != nil {
			return err
		}
	}
	for j := range p {
		b, err := c.recv(ctx, j)
		if err != nil {
			return err
		}
		if err := put(recv, j*ls, b); err != nil {
			return err
		}
	}
	return nil
}

func (c *fakeComm) AllReduce(ctx context.Context, buf any, op reduceop.Op) error {
	s, ok := buf.([]float32)
	if !ok || (op != reduceop.Sum && op != reduceop.Avg) {
		return fmt.Errorf("fake: allreduce: only float32 sum/avg, got %T %v", buf, op)
	}
	p := c.w.n
	c.w.sent[c.rank].Add(int64(2 * (p - 1) * 4 * len(s) / p))
	for j := range p {
		if err := c.send(ctx, j, append([]float32(nil), s...)); err != nil {
			return err
		}
	}
	acc := make([]float32, len(s))
	for j := range p {
		v, err := c.recv(ctx, j)
		if err != nil {
			return err
		}
		for i, x := range v.([]float32) {
			acc[i] += x // rank order: every rank gets the same bits
		}
	}
	if op == reduceop.Avg {
		for i := range acc {
			acc[i] /= float32(p)
		}
	}
	copy(s, acc)
	return nil
}

func TestFakeComm(t *testing.T) {
	for p := 1; p <= 5; p++ {
		w := newFakeWorld(p)
		err := w.run(func(c *fakeComm) error {
			ctx := context.Background()
			send := make([]uint8, 2*p)
			for i := range send {
				send[i] = uint8(10*c.rank + i/2)
			}
			recv := make([]uint8, 2*p)
			if err := c.AllToAll(ctx, send, recv); err != nil {
				return err
			}
			for j := range p {
				if recv[2*j] != uint8(10*j+c.rank) {
					return fmt.Errorf("rank %d alltoall block %d = %d", c.rank, j, recv[2*j])
				}
			}
			g := make([]float32, p)
			if err := c.AllGather(ctx, []float32{float32(c.rank)}, g); err != nil {
				return err
			}
			for j := range p {
				if g[j] != float32(j) {
					return fmt.Errorf("rank %d allgather %v", c.rank, g)
				}
			}
			s := []float32{float32(c.rank)}
			if err := c.AllReduce(ctx, s, reduceop.Sum); err != nil {
				return err
			}
			if s[0] != float32(p*(p-1)/2) {
				return fmt.Errorf("rank %d allreduce %v", c.rank, s)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
