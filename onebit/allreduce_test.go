package onebit

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestCompressedAllReduceValidation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st4, _ := NewState(10, 2)
	for _, tc := range []struct {
		name  string
		world int
		buf   []float32
		st    *State
		want  error
	}{
		{"short buffer", 2, make([]float32, 9), st4, ErrSize},
		{"long buffer", 2, make([]float32, 11), st4, ErrSize},
		{"world mismatch", 3, make([]float32, 10), st4, ErrSize},
		{"nil state", 2, make([]float32, 10), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWorld(tc.world)
			// Only rank 0 calls: any communication would block until ctx ends.
			err := CompressedAllReduce(ctx, w.comm(0), tc.buf, tc.st)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if ctx.Err() != nil || w.sent[0].Load() != 0 {
				t.Fatalf("communicated before refusing: %v, %d bytes", ctx.Err(), w.sent[0].Load())
			}
		})
	}
	for _, tc := range []struct{ n, world, padded int }{{-1, 2, 16}, {10, 0, 16}, {10, 2, 8}, {10, 2, 24}} {
		if _, err := NewStatePadded(tc.n, tc.world, tc.padded); err == nil {
			t.Errorf("NewStatePadded(%d, %d, %d) accepted", tc.n, tc.world, tc.padded)
		}
	}
}

func TestCompressedAllReduceCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, _ := NewState(10, 2)
	w := newFakeWorld(2)
	err := CompressedAllReduce(ctx, w.comm(1), make([]float32, 10), st)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("err = %v, want context.Canceled naming rank 1", err)
	}
}

func TestCompressedAllReduceEmpty(t *testing.T) {
	w := newFakeWorld(3)
	err := w.run(func(c *fakeComm) error {
		st, err := NewState(0, 3)
		if err != nil {
			return err
		}
		return CompressedAllReduce(context.Background(), c, nil, st)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runSteps feeds, for T steps, rank r the input base*(1+r/2) + noise and
// returns the running sums of the outputs (rank 0's; all ranks agree) and of
// the true averages, and the largest error-buffer entry seen in the first
// and in the second half of the steps. With reset the
// errors are zeroed before every step: no error feedback.
func runSteps(t *testing.T, n, p, steps int, reset bool) (sumOut, sumAvg []float64, maxErr [2]float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(n), uint64(p)))
	base := make([]float32, n)
	for i := range base {
		base[i] = float32(r.NormFloat64()) * float32(1+i%5) // uneven magnitudes
	}
	states := make([]*State, p)
	for i := range states {
		states[i], _ = NewState(n, p)
	}
	sumOut, sumAvg = make([]float64, n), make([]float64, n)
	w := newFakeWorld(p)
	bufs := make([][]float32, p)
	for s := range steps {
		avg := make([]float64, n)
		for k := range bufs {
			bufs[k] = make([]float32, n)
			for i := range bufs[k] {
				bufs[k][i] = base[i]*(1+float32(k)/2) + 0.3*float32(r.NormFloat64())
				avg[i] += float64(bufs[k][i]) / float64(p)
			}
		}
		err := w.run(func(c *fakeComm) error {
			if reset {
				states[c.rank].Reset()
			}
			return CompressedAllReduce(context.Background(), c, bufs[c.rank], states[c.rank])
		})
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k < p; k++ {
			for i := range bufs[k] {
				if bufs[k][i] != bufs[0][i] {
					t.Fatalf("rank %d disagrees with rank 0 at %d", k, i)
				}
			}
		}
		for i := range n {
			sumOut[i] += float64(bufs[0][i])
			sumAvg[i] += avg[i]
		}
		for _, st := range states {
			h := 2 * s / steps
			maxErr[h] = max(maxErr[h], maxAbs(st.WorkerError()), maxAbs(st.ServerError()))
		}
	}
	return sumOut, sumAvg, maxErr
}

func relGap(a, b []float64) float64 {
	var d, nb float64
	for i := range a {
		d += (a[i] - b[i]) * (a[i] - b[i])
		nb += b[i] * b[i]
	}
	return math.Sqrt(d / nb)
}

// TestErrorFeedback checks the point of error feedback: the running sum of
// the outputs tracks the running sum of the true averages, the gap being the
// (bounded) errors still held, while without feedback the bias accumulates.
func TestErrorFeedback(t *testing.T) {
	steps := 300
	if testing.Short() {
		steps = 100
	}
	for _, tc := range []struct{ n, p int }{{1, 1}, {100, 4}, {257, 3}, {1001, 9}} {
		out, avg, maxErr := runSteps(t, tc.n, tc.p, steps, false)
		gapEF := relGap(out, avg)
		out, avg, _ = runSteps(t, tc.n, tc.p, steps, true)
		gapNo := relGap(out, avg)
		t.Logf("n=%d p=%d steps=%d: relative gap of running sums: %.4f with error feedback, %.4f without; max |error| %.3g in the first half, %.3g in the second",
			tc.n, tc.p, steps, gapEF, gapNo, maxErr[0], maxErr[1])
		if maxErr[1] > 1.5*maxErr[0] {
			t.Errorf("n=%d p=%d: error keeps growing: %g, then %g", tc.n, tc.p, maxErr[0], maxErr[1])
		}
		if gapEF > 0.05 {
			t.Errorf("n=%d p=%d: with error feedback the sums drift apart: %g", tc.n, tc.p, gapEF)
		}
		if tc.n > 1 && gapNo < 0.2 {
			t.Errorf("n=%d p=%d: without error feedback the sums should not track: %g", tc.n, tc.p, gapNo)
		}
	}
}

// TestWireBytes counts what each rank hands the fake Comm and compares it
// with WireBytes, and WireBytes with the float32 ring allreduce.
func TestWireBytes(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, n := range []int{1, 7, 100, 1001, 4096} {
			w := newFakeWorld(p)
			err := w.run(func(c *fakeComm) error {
				st, err := NewState(n, p)
				if err != nil {
					return err
				}
				return CompressedAllReduce(context.Background(), c, make([]float32, n), st)
			})
			if err != nil {
				t.Fatal(err)
			}
			want := WireBytes(n, p)
			for r := range p {
				if got := w.sent[r].Load(); got != want {
					t.Errorf("p=%d n=%d rank %d sent %d bytes, WireBytes = %d", p, n, r, got, want)
				}
			}
		}
	}
	n, p := 1<<20, 8
	ratio := float64(RingAllReduceBytes(n, p)) / float64(WireBytes(n, p))
	if ratio < 31 || ratio > 32 {
		t.Errorf("ring/compressed = %.2f, want about 32", ratio)
	}
}
