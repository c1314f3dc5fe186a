package ckpt_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ckpt"
	"github.com/goccl/goccl/onebit"
)

// worker is one rank of a small data-parallel training job: model weights,
// the 1-bit allreduce error-feedback buffers, and a rank-specific extra
// blob (a data-loader cursor, say) whose length differs per rank, 0 on
// rank 0.
type worker struct {
	step  uint64
	w     []float32
	st    *onebit.State
	extra []byte
}

const trainN = 301 // weights, not a multiple of 8*6

func newWorker(rank, world int) (*worker, error) {
	st, err := onebit.NewState(trainN, world)
	if err != nil {
		return nil, err
	}
	w := make([]float32, trainN)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)))
	}
	return &worker{w: w, st: st, extra: make([]byte, 37*rank)}, nil
}

// train runs one step: a rank-dependent gradient, averaged with the 1-bit
// compressed allreduce, and an SGD update.
func (wk *worker) train(ctx context.Context, c *goccl.Comm) error {
	wk.step++
	g := make([]float32, trainN)
	for i := range g {
		g[i] = wk.w[i]*0.5 + float32(math.Cos(float64(wk.step)*0.3+float64(i)*0.07+float64(c.Rank())))
	}
	if err := onebit.CompressedAllReduce(ctx, c, g, wk.st); err != nil {
		return err
	}
	for i := range wk.w {
		wk.w[i] -= 0.05 * g[i]
	}
	for i := range wk.extra {
		wk.extra[i] = byte(wk.step) + byte(i)
	}
	return nil
}

// marshal serializes the worker's state with encoding/binary.
func (wk *worker) marshal() []byte {
	var b bytes.Buffer
	for _, v := range []any{wk.step, wk.w, wk.st.WorkerError(), wk.st.ServerError(), uint64(len(wk.extra)), wk.extra} {
		_ = binary.Write(&b, binary.LittleEndian, v)
	}
	return b.Bytes()
}

func (wk *worker) unmarshal(p []byte) error {
	r := bytes.NewReader(p)
	var n uint64
	for _, v := range []any{&wk.step, wk.w, wk.st.WorkerError(), wk.st.ServerError(), &n} {
		if err := binary.Read(r, binary.LittleEndian, v); err != nil {
			return err
		}
	}
	wk.extra = make([]byte, n)
	if err := binary.Read(r, binary.LittleEndian, wk.extra); err != nil {
		return err
	}
	if r.Len() != 0 {
		return fmt.Errorf("%d trailing bytes", r.Len())
	}
	return nil
}

// TestTrainingLoop trains on 6 ranks with k=3, m=2, saving every 3 steps,
// loses every pair of ranks (adjacent, wrap-around, far apart) after step
// 10, restores the step-9 checkpoint, checks it byte for byte against what
// was saved, resumes, and checks that the weights after step 12 are those
// of a run without failure, bit for bit.
func TestTrainingLoop(t *testing.T) {
	const n, steps, every, failAt = 6, 12, 3, 10
	cfg := ckpt.Config{DataShards: 3, ParityShards: 2}

	ref := make([][]byte, n)
	err := run(t, n, func(ctx context.Context, c *goccl.Comm) error {
		wk, err := newWorker(c.Rank(), n)
		if err != nil {
			return err
		}
		for range steps {
			if err := wk.train(ctx, c); err != nil {
				return err
			}
		}
		ref[c.Rank()] = wk.marshal()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for a := range n {
		for b := a + 1; b < n; b++ {
			lost := []int{a, b}
			t.Run(fmt.Sprintf("lost%v", lost), func(t *testing.T) {
				got := make([][]byte, n)
				err := run(t, n, func(ctx context.Context, c *goccl.Comm) error {
					r := c.Rank()
					wk, err := newWorker(r, n)
					if err != nil {
						return err
					}
					s, err := ckpt.New(c, cfg)
					if err != nil {
						return err
					}
					var saved []byte
					for wk.step < failAt {
						if err := wk.train(ctx, c); err != nil {
							return err
						}
						if wk.step%every == 0 {
							saved = wk.marshal()
							if err := s.Save(ctx, saved); err != nil {
								return err
							}
						}
					}
					if containsInt(lost, r) {
						// The rank dies; a fresh process takes its place.
						if wk, err = newWorker(r, n); err != nil {
							return err
						}
						wk.w[0] = 42 // not the checkpoint
						if s, err = ckpt.New(c, cfg); err != nil {
							return err
						}
					}
					state, err := s.Restore(ctx)
					if err != nil {
						return err
					}
					if !bytes.Equal(state, saved) {
						return fmt.Errorf("rank %d: restored %d bytes differ from the %d saved", r, len(state), len(saved))
					}
					if err := wk.unmarshal(state); err != nil {
						return fmt.Errorf("rank %d: %w", r, err)
					}
					for wk.step < steps {
						if err := wk.train(ctx, c); err != nil {
							return err
						}
					}
					got[r] = wk.marshal()
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for r := range n {
					if !bytes.Equal(got[r], ref[r]) {
						t.Errorf("rank %d: state after resuming differs from the run without failure", r)
					}
				}
			})
		}
	}
}
