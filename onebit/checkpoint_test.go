package onebit

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// stepInputs returns the inputs of step s for p ranks, the same for every
// run that asks.
func stepInputs(n, p, s int) [][]float32 {
	r := rand.New(rand.NewPCG(uint64(n*100+p), uint64(s)))
	xs := make([][]float32, p)
	for k := range xs {
		xs[k] = make([]float32, n)
		for i := range xs[k] {
			xs[k][i] = float32(r.NormFloat64()) * float32(1+k) * float32(1+i%3)
		}
	}
	return xs
}

// runFrom runs steps [from, to) on states, one per rank, and returns the
// outputs of every step and rank.
func runFrom(t *testing.T, states []*State, from, to int) [][][]float32 {
	t.Helper()
	p, n := len(states), states[0].Len()
	w := newFakeWorld(p)
	var outs [][][]float32
	for s := from; s < to; s++ {
		bufs := stepInputs(n, p, s)
		if err := w.run(func(c *fakeComm) error {
			return CompressedAllReduce(context.Background(), c, bufs[c.rank], states[c.rank])
		}); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, bufs)
	}
	return outs
}

// sameState compares everything the next steps and a caller can see.
func sameState(a, b *State) error {
	switch {
	case !sameBits(a.WorkerError(), b.WorkerError()):
		return errors.New("worker errors differ")
	case !sameBits(a.ServerError(), b.ServerError()):
		return errors.New("server errors differ")
	case !sameBits(a.WorkerScales(), b.WorkerScales()) || !sameBits(a.ServerScales(), b.ServerScales()):
		return errors.New("scales differ")
	case !bytes.Equal(a.WorkerSigns(), b.WorkerSigns()) || !bytes.Equal(a.ServerSigns(), b.ServerSigns()):
		return errors.New("signs differ")
	}
	return nil
}

// TestCheckpointRoundTrip saves every rank's State after some steps,
// restores it three ways (bytes into a zero State, bytes into a new State,
// the error buffers copied by hand), runs on, and checks that every output,
// error, scale and sign is bit for bit that of the run without the
// interruption, while a State not restored goes elsewhere.
func TestCheckpointRoundTrip(t *testing.T) {
	const before, after = 3, 3
	for _, tc := range []struct{ n, p, padded int }{
		{80, 3, PaddedLen(80, 3)},
		{80, 3, PaddedLenAdam(80, 3)},
		{100, 4, PaddedLen(100, 4)},
		{7, 1, PaddedLen(7, 1)},
		{301, 6, PaddedLenAdam(301, 6)},
	} {
		t.Run(fmt.Sprintf("n%d_p%d_padded%d", tc.n, tc.p, tc.padded), func(t *testing.T) {
			orig := make([]*State, tc.p)
			for r := range orig {
				var err error
				if orig[r], err = NewStatePadded(tc.n, tc.p, tc.padded); err != nil {
					t.Fatal(err)
				}
			}
			runFrom(t, orig, 0, before)

			saved := make([][]byte, tc.p)
			restored := map[string][]*State{"zero State": nil, "new State": nil, "by hand": nil, "not restored": nil}
			for r, st := range orig {
				b, err := st.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				saved[r] = b
				z := new(State)
				if err := z.UnmarshalBinary(b); err != nil {
					t.Fatal(err)
				}
				noLastStep(t, "restored", z)
				fresh, _ := NewStatePadded(tc.n, tc.p, tc.padded)
				if err := fresh.UnmarshalBinary(b); err != nil {
					t.Fatal(err)
				}
				hand, _ := NewStatePadded(tc.n, tc.p, tc.padded)
				copy(hand.WorkerError(), st.WorkerError())
				copy(hand.ServerError(), st.ServerError())
				none, _ := NewStatePadded(tc.n, tc.p, tc.padded)
				restored["zero State"] = append(restored["zero State"], z)
				restored["new State"] = append(restored["new State"], fresh)
				restored["by hand"] = append(restored["by hand"], hand)
				restored["not restored"] = append(restored["not restored"], none)
				if again, _ := z.MarshalBinary(); !bytes.Equal(again, b) {
					t.Errorf("rank %d: restored State marshals to other bytes", r)
				}
			}
			want := runFrom(t, orig, before, before+after)
			for how, states := range restored {
				got := runFrom(t, states, before, before+after)
				same := true
				for s := range got {
					for r := range got[s] {
						same = same && sameBits(got[s][r], want[s][r])
					}
				}
				for r := range states {
					if err := sameState(states[r], orig[r]); err != nil {
						same = false
					}
				}
				if how == "not restored" {
					if same {
						t.Errorf("a State without the saved errors computes the same: the test cannot tell")
					}
					continue
				}
				if !same {
					t.Errorf("%s: resumed run differs from the uninterrupted one", how)
				}
			}
		})
	}
}

func TestCheckpointFormat(t *testing.T) {
	st, _ := NewState(3, 2) // padded 16, chunk 8
	for i := range st.WorkerError() {
		st.WorkerError()[i] = float32(i) - 0.5
	}
	st.ServerError()[7] = float32(math.Inf(-1))
	b, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if len(b) != stateHeader+4*(16+8) || string(b[:8]) != "goccl-1b" || le.Uint32(b[8:]) != 1 ||
		le.Uint64(b[12:]) != 3 || le.Uint32(b[20:]) != 2 || le.Uint64(b[24:]) != 16 || int32(le.Uint32(b[32:])) != -1 {
		t.Fatalf("header % x", b[:min(len(b), stateHeader)])
	}
	if v := math.Float32frombits(le.Uint32(b[stateHeader+4*5:])); v != 4.5 {
		t.Errorf("worker error[5] saved as %v", v)
	}
	if v := math.Float32frombits(le.Uint32(b[len(b)-4:])); !math.IsInf(float64(v), -1) {
		t.Errorf("server error[7] saved as %v", v)
	}
	pre := []byte("prefix")
	if a, _ := st.AppendBinary(slices.Clone(pre)); !bytes.Equal(a, append(pre, b...)) {
		t.Error("AppendBinary is not prefix + MarshalBinary")
	}
}

// TestCheckpointBad: whatever is wrong with the data, UnmarshalBinary
// refuses it and leaves the State as it was.
func TestCheckpointBad(t *testing.T) {
	src, _ := NewState(10, 2)
	for i := range src.WorkerError() {
		src.WorkerError()[i] = float32(i)
	}
	good, _ := src.MarshalBinary()
	le := binary.LittleEndian
	patch := func(off int, put func(b []byte)) []byte {
		b := slices.Clone(good)
		put(b[off:])
		return b
	}
	bad := map[string][]byte{
		"empty":         nil,
		"magic":         patch(0, func(b []byte) { b[0] = 'G' }),
		"version":       patch(8, func(b []byte) { le.PutUint32(b, 2) }),
		"n > padded":    patch(12, func(b []byte) { le.PutUint64(b, 17) }),
		"world 0":       patch(20, func(b []byte) { le.PutUint32(b, 0) }),
		"world huge":    patch(20, func(b []byte) { le.PutUint32(b, math.MaxUint32) }),
		"padded odd":    patch(24, func(b []byte) { le.PutUint64(b, 24) }),
		"padded huge":   patch(24, func(b []byte) { le.PutUint64(b, 1<<62) }),
		"rank -2":       patch(32, func(b []byte) { le.PutUint32(b, uint32(0xfffffffe)) }),
		"rank = world":  patch(32, func(b []byte) { le.PutUint32(b, 2) }),
		"trailing byte": append(slices.Clone(good), 0),
	}
	for cut := range len(good) {
		bad[fmt.Sprintf("cut at %d", cut)] = good[:cut]
	}
	for name, b := range bad {
		dst, _ := NewState(10, 2)
		dst.WorkerError()[0] = 42
		if err := dst.UnmarshalBinary(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if dst.WorkerError()[0] != 42 || dst.rank != -1 {
			t.Errorf("%s: State changed", name)
		}
		z := new(State)
		if err := z.UnmarshalBinary(b); err == nil || z.world != 0 {
			t.Errorf("%s: zero State: err %v, world %d", name, err, z.world)
		}
	}
	for _, dims := range []struct{ n, p, padded int }{{9, 2, 16}, {10, 1, 16}, {10, 2, 32}} {
		dst, _ := NewStatePadded(dims.n, dims.p, dims.padded)
		if err := dst.UnmarshalBinary(good); !errors.Is(err, ErrSize) {
			t.Errorf("into a State of %v: err = %v, want ErrSize", dims, err)
		}
	}
}

// TestCheckpointRank: a restored State keeps the rank it was saved from and
// refuses another; its kernel is kept.
func TestCheckpointRank(t *testing.T) {
	w := newFakeWorld(2)
	states := make([]*State, 2)
	for r := range states {
		states[r], _ = NewState(9, 2)
	}
	if err := w.run(func(c *fakeComm) error {
		return CompressedAllReduce(context.Background(), c, make([]float32, 9), states[c.rank])
	}); err != nil {
		t.Fatal(err)
	}
	b, _ := states[1].MarshalBinary()
	st := new(State)
	k := &countingKernel{}
	st.SetKernel(k)
	if err := st.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if err := CompressedAllReduce(context.Background(), w.comm(0), make([]float32, 9), st); !errors.Is(err, ErrSize) {
		t.Fatalf("rank 0 with rank 1's restored State: err = %v", err)
	}
	if st.kernel != Kernel(k) {
		t.Error("UnmarshalBinary dropped the kernel")
	}
}

type countingKernel struct{ HostKernel }

// FuzzStateUnmarshal: any bytes are refused or restore a State that marshals
// back to exactly those bytes.
func FuzzStateUnmarshal(f *testing.F) {
	for _, d := range []struct{ n, p int }{{0, 1}, {1, 1}, {10, 2}, {37, 3}} {
		st, _ := NewState(d.n, d.p)
		b, _ := st.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st := new(State)
		if err := st.UnmarshalBinary(b); err != nil {
			return
		}
		again, err := st.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("round trip: %v, % x != % x", err, again, b)
		}
	})
}

// TestAdamCheckpoint saves 1-bit Adam on every rank, during warmup and in
// the compression stage, restores it into fresh optimizers over fresh
// parameters set to the saved ones, and checks that the parameters after
// the remaining steps are bit for bit those of the uninterrupted run, and
// that the run without the saved optimizer state ends elsewhere.
func TestAdamCheckpoint(t *testing.T) {
	const p, steps = 3, 8
	cfg := AdamConfig{LR: 0.05, WeightDecay: 0.01, FreezeStep: 3}
	lens := []int{37, 1, 100}
	grad := func(w []float32, r, s, i int) float32 {
		return w[i]/2 + float32(math.Sin(float64(1+r+7*s+3*i)))
	}
	newParams := func() [][]float32 {
		ps := make([][]float32, len(lens))
		for k, n := range lens {
			ps[k] = make([]float32, n)
			for i := range ps[k] {
				ps[k][i] = float32(i%7) / 4
			}
		}
		return ps
	}
	// run runs steps [from, steps) on every rank, starting from the
	// parameters in start (fresh ones when start is nil) and, with restore,
	// from the optimizer checkpoints in start; it returns the parameters at
	// the end, and the checkpoints and parameters once at steps are done.
	type snap struct {
		opt    [][]byte
		params [][][]float32
	}
	run := func(from, at int, start *snap, restore bool) (final [][][]float32, mid snap) {
		w := newFakeWorld(p)
		final = make([][][]float32, p)
		mid = snap{opt: make([][]byte, p), params: make([][][]float32, p)}
		if err := w.run(func(c *fakeComm) error {
			params := newParams()
			if start != nil {
				for k := range params {
					copy(params[k], start.params[c.rank][k])
				}
			}
			opt, err := NewAdam(c, cfg, params)
			if err != nil {
				return err
			}
			if restore {
				if err := opt.UnmarshalBinary(start.opt[c.rank]); err != nil {
					return err
				}
				if opt.Steps() != from {
					return fmt.Errorf("restored Steps() = %d, want %d", opt.Steps(), from)
				}
			}
			for s := from; s < steps; s++ {
				grads := make([][]float32, len(params))
				for k := range grads {
					grads[k] = make([]float32, len(params[k]))
					for i := range grads[k] {
						grads[k][i] = grad(params[k], c.rank, s, i)
					}
				}
				if err := opt.Step(context.Background(), grads); err != nil {
					return err
				}
				if s+1 == at {
					b, err := opt.MarshalBinary()
					if err != nil {
						return err
					}
					mid.opt[c.rank] = b
					for _, ps := range params {
						mid.params[c.rank] = append(mid.params[c.rank], slices.Clone(ps))
					}
				}
			}
			final[c.rank] = params
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return final, mid
	}
	same := func(a, b [][][]float32) bool {
		for r := range a {
			for k := range a[r] {
				if !sameBits(a[r][k], b[r][k]) {
					return false
				}
			}
		}
		return true
	}
	for _, at := range []int{2, 3, 5} { // in warmup, at the switch, compressing
		want, mid := run(0, at, nil, false)
		got, _ := run(at, -1, &mid, true)
		if !same(got, want) {
			t.Errorf("saved after step %d: resumed run differs from the uninterrupted one", at)
		}
		if cold, _ := run(at, -1, &mid, false); same(cold, want) {
			t.Errorf("saved after step %d: parameters alone give the same result: the test cannot tell", at)
		}
	}
}

func TestAdamCheckpointBad(t *testing.T) {
	w := newFakeWorld(1)
	opt, _ := NewAdam(w.comm(0), AdamConfig{}, [][]float32{make([]float32, 3), make([]float32, 9)})
	if err := opt.Step(context.Background(), [][]float32{{1, 2, 3}, make([]float32, 9)}); err != nil {
		t.Fatal(err)
	}
	good, _ := opt.MarshalBinary()
	fresh := func() *Adam {
		a, _ := NewAdam(w.comm(0), AdamConfig{}, [][]float32{make([]float32, 3), make([]float32, 9)})
		return a
	}
	if a := fresh(); a.UnmarshalBinary(good) != nil || a.Steps() != 1 || !sameBits(a.m[0], opt.m[0]) || !sameBits(a.v[0], opt.v[0]) {
		t.Fatal("good checkpoint not restored")
	}
	for cut := range len(good) {
		a := fresh()
		if err := a.UnmarshalBinary(good[:cut]); err == nil {
			t.Errorf("cut at %d: accepted", cut)
		}
		if a.Steps() != 0 || a.m[0][0] != 0 {
			t.Errorf("cut at %d: optimizer changed", cut)
		}
	}
	if err := fresh().UnmarshalBinary(append(slices.Clone(good), 0)); err == nil {
		t.Error("trailing byte accepted")
	}
	for _, lens := range [][]int{{3}, {3, 8}, {3, 9, 1}} {
		ps := make([][]float32, len(lens))
		for i, n := range lens {
			ps[i] = make([]float32, n)
		}
		a, _ := NewAdam(w.comm(0), AdamConfig{}, ps)
		if err := a.UnmarshalBinary(good); !errors.Is(err, ErrSize) {
			t.Errorf("into parameters of lengths %v: err = %v, want ErrSize", lens, err)
		}
	}
	a2, _ := NewAdam(newFakeWorld(2).comm(0), AdamConfig{}, [][]float32{make([]float32, 3), make([]float32, 9)})
	if err := a2.UnmarshalBinary(good); !errors.Is(err, ErrSize) {
		t.Errorf("into a world of 2: err = %v, want ErrSize", err)
	}
}
