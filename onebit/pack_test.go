package onebit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var awkward = []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 63, 64, 65, 100, 257, 1001}

// refPositive is the dumb reference of the sign rule.
func refPositive(x float32) bool { return !(x < 0) }

func refBit(bits []uint8, i int) bool { return bits[i/8]>>(7-i%8)&1 == 1 }

func randVec(r *rand.Rand, n int) []float32 {
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)),
		float32(math.Inf(-1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, -math.MaxFloat32,
		math.Float32frombits(0xffc00000)} // NaN with the sign bit set
	x := make([]float32, n)
	for i := range x {
		if r.IntN(4) == 0 {
			x[i] = specials[r.IntN(len(specials))]
		} else {
			x[i] = float32(r.NormFloat64())
		}
	}
	return x
}

func TestPosBit(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	for _, tc := range []struct {
		x    float32
		want uint32
	}{
		{0, 1}, {negZero, 1}, {1, 1}, {-1, 0}, {float32(math.NaN()), 1},
		{math.Float32frombits(0xffc00000), 1}, {float32(math.Inf(-1)), 0}, {float32(math.Inf(1)), 1},
		{-math.SmallestNonzeroFloat32, 0}, {-math.MaxFloat32, 0},
	} {
		if got := posBit(tc.x); got != tc.want {
			t.Errorf("posBit(%g [%#x]) = %d, want %d", tc.x, math.Float32bits(tc.x), got, tc.want)
		}
	}
}

// TestPackUnpack runs every Pack path (AVX where the CPU has it, the SWAR
// loop, and the per-element loop's tail) against the reference.
func TestPackUnpack(t *testing.T) {
	paths := []bool{false}
	if haveAVX {
		paths = append(paths, true)
	}
	defer func(old bool) { usePackAVX = old }(usePackAVX)
	for _, avx := range paths {
		usePackAVX = avx
		t.Run(fmt.Sprintf("avx=%v", avx), testPackUnpack)
	}
}

func testPackUnpack(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range awkward {
		x := randVec(r, n)
		bits := make([]uint8, PackedLen(n)+1)
		for i := range bits {
			bits[i] = 0xa5 // garbage Pack must overwrite, and a guard byte
		}
		Pack(bits, x)
		if bits[len(bits)-1] != 0xa5 {
			t.Fatalf("n=%d: Pack wrote past PackedLen", n)
		}
		for i := range x {
			if refBit(bits, i) != refPositive(x[i]) {
				t.Fatalf("n=%d: bit %d of %g = %v", n, i, x[i], refBit(bits, i))
			}
		}
		for i := n; i < 8*PackedLen(n); i++ {
			if refBit(bits, i) {
				t.Fatalf("n=%d: padding bit %d set (numpy.packbits pads with 0)", n, i)
			}
		}
		y := make([]float32, n)
		Unpack(y, bits)
		for i := range y {
			want := float32(-1)
			if refPositive(x[i]) {
				want = 1
			}
			if y[i] != want {
				t.Fatalf("n=%d: Unpack[%d] = %g, want %g", n, i, y[i], want)
			}
		}
	}
}

// TestHostKernel compares each HostKernel method with its documented loop.
func TestHostKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	k := HostKernel{}
	for _, n := range awkward {
		for _, nx := range []int{n, n / 2, 0} {
			e := randVec(r, n)
			for i := range e { // no NaN/Inf in the norm test
				if math.IsNaN(float64(e[i])) || math.IsInf(float64(e[i]), 0) || math.Abs(float64(e[i])) > 1e30 {
					e[i] = 0.5
				}
			}
			x := make([]float32, nx)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			want := append([]float32(nil), e...)
			var wss float64
			for i := range x {
				want[i] += x[i]
			}
			for i := range want {
				wss += float64(want[i]) * float64(want[i])
			}
			ss := k.CompensateNorm(e, x)
			if math.Abs(ss-wss) > 1e-12*wss {
				t.Fatalf("n=%d nx=%d: CompensateNorm = %g, want %g", n, nx, ss, wss)
			}
			for i := range e {
				if e[i] != want[i] {
					t.Fatalf("n=%d nx=%d: CompensateNorm err[%d] = %g, want %g", n, nx, i, e[i], want[i])
				}
			}
		}

		e := randVec(r, n)
		scale := float32(0.75)
		want := append([]float32(nil), e...)
		wbits := make([]uint8, PackedLen(n))
		for i := range want {
			if !(want[i] < 0) {
				wbits[i/8] |= 1 << (7 - i%8)
				want[i] -= scale
			} else {
				want[i] -= -scale
			}
		}
		bits := make([]uint8, PackedLen(n))
		for i := range bits {
			bits[i] = 0xff
		}
		k.PackUpdate(bits, e, scale)
		for i := range bits {
			if bits[i] != wbits[i] {
				t.Fatalf("n=%d: PackUpdate bits[%d] = %#x, want %#x", n, i, bits[i], wbits[i])
			}
		}
		for i := range e {
			if math.Float32bits(e[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(e[i])) && math.IsNaN(float64(want[i]))) {
				t.Fatalf("n=%d: PackUpdate err[%d] = %g, want %g", n, i, e[i], want[i])
			}
		}

		d := make([]float32, n)
		acc := make([]float32, n)
		for i := range acc {
			acc[i] = float32(r.NormFloat64())
		}
		wacc := append([]float32(nil), acc...)
		k.Decompress(d, bits, scale)
		k.AccumulateSigns(acc, bits, scale)
		for i := range d {
			s := -scale
			if refBit(bits, i) {
				s = scale
			}
			if d[i] != s {
				t.Fatalf("n=%d: Decompress[%d] = %g, want %g", n, i, d[i], s)
			}
			if wacc[i] += s; acc[i] != wacc[i] {
				t.Fatalf("n=%d: AccumulateSigns[%d] = %g, want %g", n, i, acc[i], wacc[i])
			}
		}
	}
}
