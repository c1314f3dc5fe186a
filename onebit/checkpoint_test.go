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
