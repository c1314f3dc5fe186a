package reduceop

import (
	"flag"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

var exhaustive32 = flag.Bool("reduceop.exhaustive32", false, "check F16FromFloat32 and BF16FromFloat32 on all 2^32 float32 inputs (slow)")

// refF16Value is binary16's definition written out: (-1)^s * 2^(e-15) *
// 1.f, or 2^-14 * 0.f for e == 0.
func refF16Value(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1f
	f := float64(h & 0x3ff)
	switch e {
	case 0x1f:
		if f != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * math.Ldexp(f/1024, -14)
	}
	return s * math.Ldexp(1+f/1024, e-15)
}

// refBF16Value is bfloat16's definition: bias 127, 7 fraction bits.
func refBF16Value(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>7) & 0xff
	f := float64(h & 0x7f)
	switch e {
	case 0xff:
		if f != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * math.Ldexp(f/128, -126)
	}
	return s * math.Ldexp(1+f/128, e-127)
}

// nearest is a brute-force round-to-nearest-even into a 16-bit format: the
// positive finite values in order of their encodings (which is their
// numerical order), the overflow threshold (the midpoint between the
// largest finite value and the next power of two), and the Inf encoding.
type nearest struct {
	vals      []float64
	overflow  float64
	inf, sign uint16
}

func newNearest(value func(uint16) float64, maxFinite uint16, overflow float64) *nearest {
	n := &nearest{overflow: overflow, inf: maxFinite + 1, sign: 0x8000}
	for h := uint16(0); h <= maxFinite; h++ {
		n.vals = append(n.vals, value(h))
	}
	return n
}

// round returns the encoding nearest to x, ties to the even encoding, or
// ok == false for NaN.
func (n *nearest) round(x float64) (h uint16, ok bool) {
	if math.IsNaN(x) {
		return 0, false
	}
	var sign uint16
	if math.Signbit(x) {
		sign, x = n.sign, -x
	}
	if x >= n.overflow {
		return sign | n.inf, true
	}
	k := sort.SearchFloat64s(n.vals, x) // first index with vals[k] >= x
	if k == len(n.vals) {
		// Above the largest finite value, below the overflow threshold.
		return sign | uint16(k-1), true
	}
	if n.vals[k] == x {
		return sign | uint16(k), true
	}
	lo, hi := k-1, k
	dl, dh := x-n.vals[lo], n.vals[hi]-x
	switch {
	case dl < dh:
		return sign | uint16(lo), true
	case dh < dl:
		return sign | uint16(hi), true
	case lo%2 == 0:
		return sign | uint16(lo), true
	}
	return sign | uint16(hi), true
}

var (
	f16Nearest  = newNearest(refF16Value, 0x7bff, 65520)
	bf16Nearest = newNearest(refBF16Value, 0x7f7f, math.Ldexp(2-1.0/256, 127))
)

// TestF16AllValues converts all 65536 encodings to float32 and back.
func TestF16AllValues(t *testing.T) {
	for i := range 1 << 16 {
		h := F16(i)
		f := h.Float32()
		want := refF16Value(uint16(i))
		if math.IsNaN(want) {
			if !isNaN32(f) {
				t.Fatalf("F16(%#04x).Float32() = %v, want NaN", i, f)
			}
			back := F16FromFloat32(f)
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 || back&0x200 == 0 || back&0x8000 != h&0x8000 {
				t.Fatalf("F16FromFloat32(NaN from %#04x) = %#04x, want a quiet NaN of the same sign", i, back)
			}
			if h&0x200 != 0 && back != h {
				t.Fatalf("quiet NaN %#04x round-trips to %#04x", i, back)
			}
			continue
		}
		if float64(f) != want || math.Signbit(float64(f)) != math.Signbit(want) {
			t.Fatalf("F16(%#04x).Float32() = %v, want %v", i, f, want)
		}
		if back := F16FromFloat32(f); back != h {
			t.Fatalf("F16FromFloat32(F16(%#04x).Float32()) = %#04x", i, back)
		}
	}
}

// TestBF16AllValues converts all 65536 encodings to float32 and back.
func TestBF16AllValues(t *testing.T) {
	for i := range 1 << 16 {
		h := BF16(i)
		f := h.Float32()
		want := refBF16Value(uint16(i))
		if math.IsNaN(want) {
			if !isNaN32(f) {
				t.Fatalf("BF16(%#04x).Float32() = %v, want NaN", i, f)
			}
			back := BF16FromFloat32(f)
			if back&0x7f80 != 0x7f80 || back&0x40 == 0 || back&0x8000 != h&0x8000 {
				t.Fatalf("BF16FromFloat32(NaN from %#04x) = %#04x, want a quiet NaN of the same sign", i, back)
			}
			if h&0x40 != 0 && back != h {
				t.Fatalf("quiet NaN %#04x round-trips to %#04x", i, back)
			}
			continue
		}
		if float64(f) != want || math.Signbit(float64(f)) != math.Signbit(want) {
			t.Fatalf("BF16(%#04x).Float32() = %v, want %v", i, f, want)
		}
		if back := BF16FromFloat32(f); back != h {
			t.Fatalf("BF16FromFloat32(BF16(%#04x).Float32()) = %#04x", i, back)
		}
	}
}

// roundingInputs returns float32 inputs that exercise rounding into a
// 16-bit format: every value, every midpoint between neighbours and one
// float32 ulp either side of it, specials, and random bit patterns.
func roundingInputs(value func(uint16) float64, maxFinite uint16, seed uint64) []float32 {
	var in []float32
	add := func(x float64) {
		f := float32(x)
		in = append(in, f, -f, math.Nextafter32(f, 0), math.Nextafter32(f, float32(math.Inf(1))))
	}
	for h := uint16(0); h <= maxFinite; h++ {
		v := value(h)
		add(v)
		next := value(h + 1) // for maxFinite, Inf: midpoint below is the overflow threshold
		if h == maxFinite {
			e := math.Ilogb(v)
			next = math.Ldexp(1, e+1)
		}
		add((v + next) / 2)
	}
	in = append(in, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00000), math.MaxFloat32,
		math.SmallestNonzeroFloat32, 65504, 65519.998, 65520, 65536)
	r := rand.New(rand.NewPCG(seed, 1))
	for range 1 << 17 {
		in = append(in, math.Float32frombits(r.Uint32()))
	}
	return in
}

func TestF16FromFloat32(t *testing.T) {
	for _, f := range roundingInputs(refF16Value, 0x7bff, 16) {
		checkF16Rounding(t, f)
	}
}

func TestBF16FromFloat32(t *testing.T) {
	for _, f := range roundingInputs(refBF16Value, 0x7f7f, 17) {
		checkBF16Rounding(t, f)
	}
}

func checkF16Rounding(t *testing.T, f float32) {
	got := F16FromFloat32(f)
	want, ok := f16Nearest.round(float64(f))
	if !ok {
		if got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
			t.Fatalf("F16FromFloat32(%#08x) = %#04x, want NaN", math.Float32bits(f), got)
		}
		return
	}
	if uint16(got) != want {
		t.Fatalf("F16FromFloat32(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
	}
}

func checkBF16Rounding(t *testing.T, f float32) {
	got := BF16FromFloat32(f)
	want, ok := bf16Nearest.round(float64(f))
	if !ok {
		if got&0x7f80 != 0x7f80 || got&0x7f == 0 {
			t.Fatalf("BF16FromFloat32(%#08x) = %#04x, want NaN", math.Float32bits(f), got)
		}
		return
	}
	if uint16(got) != want {
		t.Fatalf("BF16FromFloat32(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
	}
}

// TestHalfFromFloat32Exhaustive checks every float32 input; it takes
// minutes, so it runs only with -reduceop.exhaustive32.
func TestHalfFromFloat32Exhaustive(t *testing.T) {
	if !*exhaustive32 {
		t.Skip("run with -reduceop.exhaustive32")
	}
	for b := uint64(0); b < 1<<32; b++ {
		f := math.Float32frombits(uint32(b))
		checkF16Rounding(t, f)
		checkBF16Rounding(t, f)
	}
}

func TestHalfString(t *testing.T) {
	if s := F16FromFloat32(1.5).String(); s != "1.5" {
		t.Errorf("F16(1.5).String() = %q", s)
	}
	if s := BF16FromFloat32(-2).String(); s != "-2" {
		t.Errorf("BF16(-2).String() = %q", s)
	}
}

func isNaN32(f float32) bool { return f != f }
