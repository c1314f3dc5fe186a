package onebit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestPaddedLen(t *testing.T) {
	for _, tc := range []struct{ n, p, ds8p, adam int }{
		{0, 1, 0, 0}, {1, 1, 8, 8}, {8, 1, 8, 8}, {9, 1, 16, 16},
		{0, 2, 0, 0}, {17, 2, 32, 32},
		{0, 3, 0, 0}, {1, 3, 24, 72}, {24, 3, 24, 72}, {25, 3, 48, 72}, {72, 3, 72, 72}, {73, 3, 96, 144},
		{33, 4, 64, 64},
		{0, 5, 0, 0}, {1, 5, 40, 200}, {200, 5, 200, 200}, {201, 5, 240, 400},
		{0, 6, 0, 0}, {1, 6, 48, 144}, {100, 6, 144, 144}, {145, 6, 192, 288},
		{65, 8, 128, 128},
		{0, 12, 0, 0}, {1, 12, 96, 288}, {96, 12, 96, 288}, {97, 12, 192, 288}, {289, 12, 384, 576},
		{1, 16, 128, 256},
	} {
		if got := PaddedLen(tc.n, tc.p); got != tc.ds8p {
			t.Errorf("PaddedLen(%d, %d) = %d, want %d", tc.n, tc.p, got, tc.ds8p)
		}
		if got := PaddedLenAdam(tc.n, tc.p); got != tc.adam {
			t.Errorf("PaddedLenAdam(%d, %d) = %d, want %d", tc.n, tc.p, got, tc.adam)
		}
	}
}

// TestPaddedLenRules compares both rules with a dumb search, and with
// OnebitAdam's arithmetic (round up only when there is a remainder, the
// divider being p*8/gcd(p,8)), and checks the doc's claims: PaddedLenAdam is
// never less, equal for every n when p divides 8 and larger for some n
// otherwise, and its chunks are multiples of 8 and p.
func TestPaddedLenRules(t *testing.T) {
	gcd := func(a, b int) int {
		for b != 0 {
			a, b = b, a%b
		}
		return a
	}
	smallest := func(n, m int) int {
		k := n
		for k%m != 0 {
			k++
		}
		return k
	}
	for p := 1; p <= 24; p++ {
		divider := p * 8 / gcd(p, 8)
		for n := 0; n <= 700; n++ {
			got8, gotA := PaddedLen(n, p), PaddedLenAdam(n, p)
			if want := smallest(n, 8*p); got8 != want {
				t.Fatalf("PaddedLen(%d, %d) = %d, want %d", n, p, got8, want)
			}
			want := n
			if r := n % (p * divider); r != 0 {
				want += p*divider - r
			}
			if gotA != want {
				t.Fatalf("PaddedLenAdam(%d, %d) = %d, want %d", n, p, gotA, want)
			}
			if chunk := gotA / p; gotA%p != 0 || chunk%8 != 0 || chunk%p != 0 {
				t.Fatalf("PaddedLenAdam(%d, %d) = %d: chunk not a multiple of 8 and %d", n, p, gotA, p)
			}
			if gotA < got8 || (n == 1 && 8%p != 0 && gotA == got8) {
				t.Fatalf("n=%d p=%d: PaddedLenAdam %d, PaddedLen %d", n, p, gotA, got8)
			}
			if 8%p == 0 && got8 != gotA {
				t.Fatalf("n=%d p=%d divides 8: PaddedLen %d != PaddedLenAdam %d", n, p, got8, gotA)
			}
		}
	}
}

// noLastStep fails unless st reports no last step through every accessor.
func noLastStep(t *testing.T, what string, st *State) {
	t.Helper()
	if v, ok := st.WorkerScale(); ok || v != 0 {
		t.Errorf("%s: WorkerScale = %v, %v; want none", what, v, ok)
	}
	if v, ok := st.ServerScale(); ok || v != 0 {
		t.Errorf("%s: ServerScale = %v, %v; want none", what, v, ok)
	}
	if st.WorkerScales() != nil || st.ServerScales() != nil || st.WorkerSigns() != nil || st.ServerSigns() != nil {
		t.Errorf("%s: last-step slices not nil", what)
	}
}

func TestLastStepNone(t *testing.T) {
	st, _ := NewState(10, 2)
	noLastStep(t, "new State", st)

	// A refused call leaves the State as it was; a failed one has no last step.
	w := newFakeWorld(2)
	bufs := [][]float32{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8}}
	states := []*State{st, nil}
	states[1], _ = NewState(10, 2)
	run := func() {
		t.Helper()
		if err := w.run(func(c *fakeComm) error {
			return CompressedAllReduce(context.Background(), c, bufs[c.rank], states[c.rank])
		}); err != nil {
			t.Fatal(err)
		}
	}
	run()
	before, ok := st.WorkerScale()
	if !ok {
		t.Fatal("no last step after a successful call")
	}
	if err := CompressedAllReduce(context.Background(), w.comm(0), make([]float32, 9), st); !errors.Is(err, ErrSize) {
		t.Fatalf("short buffer: err = %v", err)
	}
	if after, ok := st.WorkerScale(); !ok || after != before {
		t.Errorf("refused call changed the last step: %v, %v; was %v", after, ok, before)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := CompressedAllReduce(ctx, w.comm(0), bufs[0], st); err == nil {
		t.Fatal("cancelled call succeeded")
	}
	noLastStep(t, "after a failed call", st)

	st.Reset()
	noLastStep(t, "after Reset", st)

	w0 := newFakeWorld(3)
	if err := w0.run(func(c *fakeComm) error {
		st, err := NewState(0, 3)
		if err != nil {
			return err
		}
		if err := CompressedAllReduce(context.Background(), c, nil, st); err != nil {
			return err
		}
		noLastStep(t, "zero-length State", st)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestStateRankBound: a State that holds rank r's errors refuses another
// rank before sending anything, until it is Reset.
func TestStateRankBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w := newFakeWorld(2)
	states := make([]*State, 2)
	for r := range states {
		states[r], _ = NewState(5, 2)
	}
	if err := w.run(func(c *fakeComm) error {
		return CompressedAllReduce(ctx, c, make([]float32, 5), states[c.rank])
	}); err != nil {
		t.Fatal(err)
	}
	sent := w.sent[0].Load()
	err := CompressedAllReduce(ctx, w.comm(0), make([]float32, 5), states[1])
	if !errors.Is(err, ErrSize) || w.sent[0].Load() != sent || ctx.Err() != nil {
		t.Fatalf("rank 0 with rank 1's State: err = %v, sent %d bytes more", err, w.sent[0].Load()-sent)
	}
	states[0].Reset()
	states[1].Reset()
	if err := w.run(func(c *fakeComm) error {
		return CompressedAllReduce(ctx, c, make([]float32, 5), states[1-c.rank])
	}); err != nil {
		t.Fatalf("swapped after Reset: %v", err)
	}
}

// refCompress is the dumb reference of one compression: the scale of c
// (sum of squares in float64, in order), its packed signs, and c minus
// scale*(±1), the new error.
func refCompress(c []float32) (scale float32, bits []uint8, errOut []float32) {
	var ss float64
	for _, v := range c {
		ss += float64(v) * float64(v)
	}
	scale = float32(math.Sqrt(ss)) / float32(math.Sqrt(float64(len(c))))
	bits = make([]uint8, (len(c)+7)/8)
	errOut = make([]float32, len(c))
	for i, v := range c {
		if !(v < 0) {
			bits[i/8] |= 1 << (7 - i%8)
			errOut[i] = v - scale
		} else {
			errOut[i] = v + scale
		}
	}
	return scale, bits, errOut
}

func bit(bits []uint8, i int) bool { return bits[i/8]>>(7-i%8)&1 == 1 }

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// TestLastStepReference runs a few steps with both padding rules, at world
// sizes that divide 8 and that do not, and checks every last-step accessor
// on every rank against the dumb reference fed with the errors read before
// the step: signs exactly, scales to float32 rounding, the output exactly
// from the reported server signs and scales.
func TestLastStepReference(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5, 6} {
		for _, n := range []int{1, 37, 100} {
			for _, rule := range []struct {
				name string
				f    func(n, p int) int
			}{{"8p", PaddedLen}, {"adam", PaddedLenAdam}} {
				t.Run(fmt.Sprintf("p%d_n%d_%s", p, n, rule.name), func(t *testing.T) {
					checkLastSteps(t, n, p, rule.f(n, p))
				})
			}
		}
	}
}

func checkLastSteps(t *testing.T, n, p, padded int) {
	r := rand.New(rand.NewPCG(uint64(n), uint64(p*1000+padded)))
	chunk := padded / p
	states := make([]*State, p)
	for i := range states {
		var err error
		if states[i], err = NewStatePadded(n, p, padded); err != nil {
			t.Fatal(err)
		}
	}
	w := newFakeWorld(p)
	for step := range 3 {
		bufs := make([][]float32, p)
		prevW := make([][]float32, p)
		prevS := make([][]float32, p)
		for k := range p {
			bufs[k] = make([]float32, n)
			for i := range bufs[k] {
				switch r.IntN(8) {
				case 0:
					bufs[k][i] = 0
				case 1:
					bufs[k][i] = float32(math.Copysign(0, -1))
				default:
					bufs[k][i] = float32(r.NormFloat64()) * float32(1+k)
				}
			}
			prevW[k] = slices.Clone(states[k].WorkerError())
			prevS[k] = slices.Clone(states[k].ServerError())
		}
		ins := make([][]float32, p)
		for k := range p {
			ins[k] = slices.Clone(bufs[k])
		}
		if err := w.run(func(c *fakeComm) error {
			return CompressedAllReduce(context.Background(), c, bufs[c.rank], states[c.rank])
		}); err != nil {
			t.Fatal(err)
		}
		// Worker side, each rank against the reference.
		wscales := states[0].WorkerScales()
		wsigns := make([][]uint8, p)
		for k, st := range states {
			c := make([]float32, padded)
			copy(c, ins[k])
			for i := range c {
				c[i] += prevW[k][i]
			}
			scale, bits, _ := refCompress(c)
			got, ok := st.WorkerScale()
			if !ok {
				t.Fatalf("step %d rank %d: no worker scale", step, k)
			}
			if err := closeTo([]float32{got}, []float32{scale}, 0); err != nil {
				t.Errorf("step %d rank %d: worker scale: %v", step, k, err)
			}
			wsigns[k] = st.WorkerSigns()
			if !bytes.Equal(wsigns[k], bits) {
				t.Errorf("step %d rank %d: worker signs %x, want %x", step, k, wsigns[k], bits)
			}
			if ws := st.WorkerScales(); !sameBits(ws, wscales) || ws[k] != got {
				t.Errorf("step %d rank %d: WorkerScales %v, rank 0 has %v, own %v", step, k, ws, wscales, got)
			}
		}
		// Server side: rank k's chunk from the reported worker signs and scales.
		inv := float32(1 / float64(p))
		sscales := states[0].ServerScales()
		ssigns := states[0].ServerSigns()
		for k, st := range states {
			c := make([]float32, chunk)
			for j := range p {
				for i := range c {
					if bit(wsigns[j], k*chunk+i) {
						c[i] += wscales[j] * inv
					} else {
						c[i] += -(wscales[j] * inv)
					}
				}
			}
			for i := range c {
				c[i] += prevS[k][i]
			}
			scale, bits, _ := refCompress(c)
			got, ok := st.ServerScale()
			if !ok {
				t.Fatalf("step %d rank %d: no server scale", step, k)
			}
			if err := closeTo([]float32{got}, []float32{scale}, 0); err != nil {
				t.Errorf("step %d rank %d: server scale: %v", step, k, err)
			}
			if !sameBits(st.ServerScales(), sscales) || sscales[k] != got {
				t.Errorf("step %d rank %d: ServerScales %v, own %v", step, k, st.ServerScales(), got)
			}
			if !bytes.Equal(st.ServerSigns(), ssigns) {
				t.Errorf("step %d rank %d: server signs differ from rank 0's", step, k)
			}
			if cb := chunk / 8; !bytes.Equal(ssigns[k*cb:(k+1)*cb], bits) {
				t.Errorf("step %d: chunk %d of the server signs %x, want %x", step, k, ssigns[k*cb:(k+1)*cb], bits)
			}
		}
		// The output is made of the server signs and scales only.
		for k := range p {
			for i, v := range bufs[k] {
				want := sscales[i/chunk]
				if !bit(ssigns, i) {
					want = -want
				}
				if math.Float32bits(v) != math.Float32bits(want) {
					t.Fatalf("step %d rank %d: output[%d] = %v, want %v", step, k, i, v, want)
				}
			}
		}
	}
}

// TestLastStepCopies: what the accessors return is the caller's.
func TestLastStepCopies(t *testing.T) {
	w := newFakeWorld(2)
	states := make([]*State, 2)
	for r := range states {
		states[r], _ = NewState(20, 2)
	}
	if err := w.run(func(c *fakeComm) error {
		buf := make([]float32, 20)
		for i := range buf {
			buf[i] = float32(i*(c.rank+1)) - 7
		}
		return CompressedAllReduce(context.Background(), c, buf, states[c.rank])
	}); err != nil {
		t.Fatal(err)
	}
	st := states[0]
	ws, ss, wb, sb := st.WorkerScales(), st.ServerScales(), st.WorkerSigns(), st.ServerSigns()
	for _, f := range []func(){
		func() { st.WorkerScales()[0]++ },
		func() { st.ServerScales()[1]++ },
		func() { st.WorkerSigns()[0] ^= 0xff },
		func() { st.ServerSigns()[2] ^= 0xff },
	} {
		f()
	}
	if !sameBits(ws, st.WorkerScales()) || !sameBits(ss, st.ServerScales()) ||
		!bytes.Equal(wb, st.WorkerSigns()) || !bytes.Equal(sb, st.ServerSigns()) {
		t.Error("writing to a returned slice changed the State")
	}
}
