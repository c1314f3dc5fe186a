package reduceop

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// Lengths in elements: empty, shorter than, equal to and just past the
// unroll width, an odd 1000+, and the 16-bit block size ±1.
// The SIMD block sizes ±1 (simdMin, 96) follow.
var testLens = []int{0, 1, 2, 3, 7, 8, 9, 31, 1001, halfBlock - 1, halfBlock, halfBlock + 1, 2*halfBlock + 3,
	simdMin - 1, simdMin, simdMin + 1, 95, 96, 97}

// forEachPath runs f once with the pure-Go loops and, where this machine
// has them, once more with the SIMD fast paths, and restores useSIMD.
func forEachPath(t *testing.T, f func(t *testing.T)) {
	defer func(saved bool) { useSIMD = saved }(useSIMD)
	paths := []bool{false}
	if haveSIMD {
		paths = append(paths, true)
	}
	for _, simd := range paths {
		useSIMD = simd
		name := "purego"
		if simd {
			name = "simd"
		}
		t.Run(name, f)
	}
}

// guard is how many elements of guard band surround each kernel-written
// buffer; guardByte fills them.
const (
	guard     = 5
	guardByte = 0xa5
)

func bytesAs[T any](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(*new(T))))
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// val holds one element for the reference: floats widened to float64,
// integers sign- (or for unsigned types zero-) extended to int64 (uint64
// keeps its bits), bools as 0 or 1 in i (any nonzero byte is true),
// complex numbers widened to complex128.
type val struct {
	f float64
	i int64
	c complex128
}

// get reads element i of dt from b with encoding/binary, independently of
// the unsafe views the package uses.
func get(dt DType, b []byte, i int) val {
	le := binary.LittleEndian
	switch dt {
	case Float32:
		return val{f: float64(math.Float32frombits(le.Uint32(b[4*i:])))}
	case Float64:
		return val{f: math.Float64frombits(le.Uint64(b[8*i:]))}
	case Float16:
		return val{f: float64(F16(le.Uint16(b[2*i:])).Float32())}
	case BFloat16:
		return val{f: float64(BF16(le.Uint16(b[2*i:])).Float32())}
	case Int8:
		return val{i: int64(int8(b[i]))}
	case Uint8:
		return val{i: int64(b[i])}
	case Int32:
		return val{i: int64(int32(le.Uint32(b[4*i:])))}
	case Int64, Uint64:
		return val{i: int64(le.Uint64(b[8*i:]))}
	case Uint16:
		return val{i: int64(le.Uint16(b[2*i:]))}
	case Int16:
		return val{i: int64(int16(le.Uint16(b[2*i:])))}
	case Uint32:
		return val{i: int64(le.Uint32(b[4*i:]))}
	case Bool:
		if b[i] != 0 {
			return val{i: 1}
		}
		return val{}
	case Complex64:
		return val{c: complex(float64(math.Float32frombits(le.Uint32(b[8*i:]))), float64(math.Float32frombits(le.Uint32(b[8*i+4:]))))}
	case Complex128:
		return val{c: complex(math.Float64frombits(le.Uint64(b[16*i:])), math.Float64frombits(le.Uint64(b[16*i+8:])))}
	}
	panic("bad dtype")
}

// set writes v as element i of dt: floats round to nearest even (F16 and
// BF16 through float32), integers truncate (wrap).
func set(dt DType, b []byte, i int, v val) {
	le := binary.LittleEndian
	switch dt {
	case Float32:
		le.PutUint32(b[4*i:], math.Float32bits(float32(v.f)))
	case Float64:
		le.PutUint64(b[8*i:], math.Float64bits(v.f))
	case Float16:
		le.PutUint16(b[2*i:], uint16(F16FromFloat32(float32(v.f))))
	case BFloat16:
		le.PutUint16(b[2*i:], uint16(BF16FromFloat32(float32(v.f))))
	case Int8, Uint8:
		b[i] = byte(v.i)
	case Int32, Uint32:
		le.PutUint32(b[4*i:], uint32(v.i))
	case Int64, Uint64:
		le.PutUint64(b[8*i:], uint64(v.i))
	case Int16, Uint16:
		le.PutUint16(b[2*i:], uint16(v.i))
	case Bool:
		b[i] = 0
		if v.i != 0 {
			b[i] = 1
		}
	case Complex64:
		le.PutUint32(b[8*i:], math.Float32bits(float32(real(v.c))))
		le.PutUint32(b[8*i+4:], math.Float32bits(float32(imag(v.c))))
	case Complex128:
		le.PutUint64(b[16*i:], math.Float64bits(real(v.c)))
		le.PutUint64(b[16*i+8:], math.Float64bits(imag(v.c)))
	}
}

// refFloat is the scalar reference for floats, in float64. For two inputs
// of a narrower format the float64 result rounded to that format is the
// correctly rounded result (float64 has more than twice the precision
// plus two), which is what the kernels must produce.
func refFloat(op Op, a, b float64) float64 {
	switch op {
	case Sum, Avg:
		return a + b
	case Prod:
		return a * b
	case Min, Max:
		if math.IsNaN(a) || math.IsNaN(b) {
			return math.NaN()
		}
		if a == b { // equal, or +0 and -0
			if (op == Min) == math.Signbit(a) {
				return a
			}
			return b
		}
		if (a < b) == (op == Min) {
			return a
		}
		return b
	}
	panic("bad op " + op.String())
}

// refInt is the scalar reference for integers: int64 arithmetic, wrapped
// to the element width by set. With unsigned, Min and Max compare a and b
// as uint64 (for Uint64; the narrower unsigned types are zero-extended, so
// either comparison works for them). Bools are 0 and 1, for which Min is
// and, Max is or and the bitwise ops are the logical ones.
func refInt(op Op, a, b int64, unsigned bool) int64 {
	less := a < b
	if unsigned {
		less = uint64(a) < uint64(b)
	}
	switch op {
	case Sum:
		return a + b
	case Prod:
		return a * b
	case Min:
		if less {
			return a
		}
		return b
	case Max:
		if !less {
			return a
		}
		return b
	case BAnd:
		return a & b
	case BOr:
		return a | b
	case BXor:
		return a ^ b
	}
	panic("bad op " + op.String())
}

// refComplex is the scalar reference for complex numbers: Go's own
// complex arithmetic in the element's precision, one element at a time.
func refComplex(dt DType, op Op, a, b complex128) complex128 {
	if dt == Complex64 {
		x, y := complex64(a), complex64(b)
		switch op {
		case Sum, Avg:
			return complex128(x + y)
		case Prod:
			return complex128(x * y)
		}
	} else {
		switch op {
		case Sum, Avg:
			return a + b
		case Prod:
			return a * b
		}
	}
	panic("bad op " + op.String())
}

// reference computes the expected dst after dst op= src, element by element.
func reference(dt DType, op Op, dst, src []byte) []byte {
	want := bytes.Clone(dst)
	for i := range len(dst) / dt.Size() {
		a, b := get(dt, dst, i), get(dt, src, i)
		switch {
		case dt.IsFloat():
			set(dt, want, i, val{f: refFloat(op, a.f, b.f)})
		case dt.IsComplex():
			set(dt, want, i, val{c: refComplex(dt, op, a.c, b.c)})
		default:
			set(dt, want, i, val{i: refInt(op, a.i, b.i, dt.IsUnsigned())})
		}
	}
	return want
}

var float64Specials = []float64{
	0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(),
	math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 65504, -65504, 6e-8, 1e-40,
	math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1, 1.0 / 3,
}

// fill puts random elements of dt into b: for floats a mix of specials
// (NaN, ±Inf, ±0, subnormals, extremes), small values that make exact
// ties likely, and random bit patterns.
//
// Bools are 0 or 1, with one byte in ten another nonzero value (true, as a
// peer might send it). Complex numbers are NaN-free: small parts that make
// ties likely, or normal values of moderate magnitude, so that Go's
// complex product and the reference agree exactly.
func fill(r *rand.Rand, dt DType, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	switch {
	case dt == Bool:
		for i := range b {
			if r.IntN(10) != 0 {
				b[i] &= 1
			}
		}
		return
	case dt.IsComplex():
		part := func() float64 {
			if r.IntN(2) == 0 {
				return float64(r.IntN(65)-32) / 4
			}
			return r.NormFloat64() * math.Pow(10, float64(r.IntN(11)-5))
		}
		for i := range len(b) / dt.Size() {
			set(dt, b, i, val{c: complex(part(), part())})
		}
		return
	case !dt.IsFloat():
		return
	}
	for i := range len(b) / dt.Size() {
		switch k := r.IntN(10); {
		case k == 0:
			set(dt, b, i, val{f: float64Specials[r.IntN(len(float64Specials))]})
		case k < 5:
			set(dt, b, i, val{f: float64(r.IntN(65)-32) / 4})
		case dt == Float64 && k < 8:
			set(dt, b, i, val{f: r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20))})
		}
		// Otherwise keep the random bit pattern.
	}
}

// equalElems compares two buffers of dt element by element; any NaN
// matches any NaN. It returns the first mismatch.
func equalElems(dt DType, got, want []byte) (int, bool) {
	for i := range len(want) / dt.Size() {
		g, w := got[i*dt.Size():(i+1)*dt.Size()], want[i*dt.Size():(i+1)*dt.Size()]
		if bytes.Equal(g, w) {
			continue
		}
		if dt.IsFloat() && math.IsNaN(get(dt, got, i).f) && math.IsNaN(get(dt, want, i).f) {
			continue
		}
		if dt.IsComplex() && sameNaNs(get(dt, got, i).c, get(dt, want, i).c) {
			continue
		}
		return i, false
	}
	return 0, true
}

// sameNaNs reports whether a and b are equal, any NaN part matching any
// NaN part.
func sameNaNs(a, b complex128) bool {
	eq := func(x, y float64) bool {
		return math.Float64bits(x) == math.Float64bits(y) || math.IsNaN(x) && math.IsNaN(y)
	}
	return eq(real(a), real(b)) && eq(imag(a), imag(b))
}

// guarded returns a buffer of n elements of dt with guard elements of
// guardByte on each side, and the inner slice (whose capacity reaches into
// the guard after it).
func guarded(dt DType, n int) (all, inner []byte) {
	all = bytes.Repeat([]byte{guardByte}, (n+2*guard)*dt.Size())
	return all, all[guard*dt.Size() : (guard+n)*dt.Size()]
}

func checkGuards(t *testing.T, dt DType, all []byte) {
	t.Helper()
	g := guard * dt.Size()
	for i, c := range append(all[:g:g], all[len(all)-g:]...) {
		if c != guardByte {
			t.Fatalf("guard byte %d overwritten: %#x", i, c)
		}
	}
}

func TestCheck(t *testing.T) {
	valid := map[Op][4]bool{ // {float, integer, bool, complex}
		Sum: {true, true, false, true}, Prod: {true, true, false, true},
		Min: {true, true, true, false}, Max: {true, true, true, false},
		Avg:  {true, false, false, true},
		BAnd: {false, true, true, false}, BOr: {false, true, true, false}, BXor: {false, true, true, false},
	}
	for _, dt := range DTypes {
		k := 0
		for _, is := range []bool{dt.IsFloat(), dt.IsInteger(), dt == Bool, dt.IsComplex()} {
			if is {
				k++
			}
		}
		if k != 1 {
			t.Errorf("%v is of %d kinds (float, integer, bool, complex), want 1", dt, k)
		}
		if dt.IsUnsigned() && !dt.IsInteger() {
			t.Errorf("%v is unsigned but not an integer", dt)
		}
	}
	for _, dt := range DTypes {
		for _, op := range Ops {
			v := valid[op]
			var want bool
			switch {
			case dt.IsFloat():
				want = v[0]
			case dt.IsInteger():
				want = v[1]
			case dt == Bool:
				want = v[2]
			default:
				want = v[3]
			}
			err := Check(op, dt)
			if (err == nil) != want {
				t.Errorf("Check(%v, %v) = %v, want valid=%v", op, dt, err, want)
			}
			if err != nil && !errors.Is(err, ErrUnsupported) {
				t.Errorf("Check(%v, %v) = %v, does not wrap ErrUnsupported", op, dt, err)
			}
		}
	}
	for _, c := range []struct {
		op Op
		dt DType
	}{{Sum, 0}, {Sum, Complex128 + 1}, {0, Float32}, {BXor + 1, Int8}} {
		if err := Check(c.op, c.dt); err == nil || errors.Is(err, ErrUnsupported) {
			t.Errorf("Check(%v, %v) = %v, want an invalid-argument error", c.op, c.dt, err)
		}
	}
}

// TestApply runs every dtype x op x length against the scalar reference,
// with guard bands around dst.
func TestApply(t *testing.T) { forEachPath(t, testApply) }

func testApply(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dt := range DTypes {
		for _, op := range Ops {
			for _, n := range testLens {
				all, dst := guarded(dt, n)
				src := make([]byte, n*dt.Size())
				fill(r, dt, dst)
				fill(r, dt, src)
				srcBefore, dstBefore := bytes.Clone(src), bytes.Clone(dst)
				err := Apply(dt, op, dst, src)
				checkGuards(t, dt, all)
				if !bytes.Equal(src, srcBefore) {
					t.Fatalf("%v %v n=%d: src changed", op, dt, n)
				}
				if Check(op, dt) != nil {
					if !errors.Is(err, ErrUnsupported) {
						t.Fatalf("Apply(%v, %v) = %v, want ErrUnsupported", dt, op, err)
					}
					if !bytes.Equal(dst, dstBefore) {
						t.Fatalf("Apply(%v, %v) failed but changed dst", dt, op)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Apply(%v, %v, n=%d): %v", dt, op, n, err)
				}
				want := reference(dt, op, dstBefore, src)
				if i, ok := equalElems(dt, dst, want); !ok {
					t.Fatalf("Apply(%v, %v, n=%d): element %d: %v op %v = %v, want %v", dt, op, n, i,
						get(dt, dstBefore, i), get(dt, src, i), get(dt, dst, i), get(dt, want, i))
				}
			}
		}
	}
}

// TestApplyAliased reduces a buffer with itself (dst == src).
func TestApplyAliased(t *testing.T) { forEachPath(t, testApplyAliased) }

func testApplyAliased(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range DTypes {
		for _, op := range Ops {
			if Check(op, dt) != nil {
				continue
			}
			buf := make([]byte, 37*dt.Size())
			fill(r, dt, buf)
			want := reference(dt, op, buf, buf)
			if err := Apply(dt, op, buf, buf); err != nil {
				t.Fatal(err)
			}
			if i, ok := equalElems(dt, buf, want); !ok {
				t.Fatalf("aliased %v %v: element %d = %v, want %v", op, dt, i, get(dt, buf, i), get(dt, want, i))
			}
		}
	}
}

func TestApplyErrors(t *testing.T) {
	for _, c := range []struct {
		name     string
		dt       DType
		op       Op
		dst, src int
	}{
		{"length mismatch", Float32, Sum, 8, 12},
		{"length mismatch empty src", Int8, Sum, 1, 0},
		{"not whole elements", Float64, Max, 12, 12},
		{"not whole f16", Float16, Sum, 3, 3},
		{"avg on int", Int32, Avg, 8, 8},
		{"band on float", Float32, BAnd, 8, 8},
		{"bad dtype", 0, Sum, 8, 8},
		{"bad op", Float32, 0, 8, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := bytes.Repeat([]byte{7}, c.dst)
			if err := Apply(c.dt, c.op, dst, make([]byte, c.src)); err == nil {
				t.Fatal("no error")
			} else {
				t.Log(err)
			}
			if !bytes.Equal(dst, bytes.Repeat([]byte{7}, c.dst)) {
				t.Fatal("dst changed")
			}
		})
	}
}

func TestScale(t *testing.T) { forEachPath(t, testScale) }

func testScale(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range DTypes {
		for _, n := range testLens {
			for _, k := range []int{1, 2, 3, 7, 9} {
				all, buf := guarded(dt, n)
				fill(r, dt, buf)
				before := bytes.Clone(buf)
				err := Scale(dt, buf, k)
				checkGuards(t, dt, all)
				if !dt.IsFloat() && !dt.IsComplex() {
					if !errors.Is(err, ErrUnsupported) || !bytes.Equal(buf, before) {
						t.Fatalf("Scale(%v) = %v, want ErrUnsupported and dst unchanged", dt, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				want := bytes.Clone(before)
				for i := range n {
					x := get(dt, before, i)
					switch dt {
					case Complex64:
						c := complex64(x.c)
						x.c = complex128(complex(real(c)/float32(k), imag(c)/float32(k)))
					case Complex128:
						x.c = complex(real(x.c)/float64(k), imag(x.c)/float64(k))
					default:
						x.f /= float64(k)
					}
					set(dt, want, i, x)
				}
				if i, ok := equalElems(dt, buf, want); !ok {
					t.Fatalf("Scale(%v, n=%d, %d): element %d: %v / %d = %v, want %v", dt, n, k, i,
						get(dt, before, i), k, get(dt, buf, i), get(dt, want, i))
				}
			}
		}
	}
	for _, k := range []int{0, -1} {
		if err := Scale(Float32, make([]byte, 8), k); err == nil {
			t.Errorf("Scale by %d: no error", k)
		}
	}
	if err := Scale(Float64, make([]byte, 9), 2); err == nil {
		t.Error("Scale of 9 bytes of float64: no error")
	}
}

// TestAvg checks Avg end to end: Apply sums, Scale divides by the group
// size once at the end.
func TestAvg(t *testing.T) {
	ranks := [][]float32{{1, 2, 3}, {3, 4, 5}, {5, 6, 7.5}}
	acc := bytes.Clone(bytesOf(ranks[0]))
	for _, r := range ranks[1:] {
		if err := (Host{}).Reduce(Float32, Avg, acc, bytesOf(r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := (Host{}).Scale(Float32, acc, len(ranks)); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(bytesAs[float32](acc)), "[3 4 5.1666665]"; got != want {
		t.Errorf("avg = %s, want %s", got, want)
	}
}

func TestDTypeOf(t *testing.T) {
	got := []DType{DTypeOf[float32](), DTypeOf[float64](), DTypeOf[F16](), DTypeOf[BF16](),
		DTypeOf[int8](), DTypeOf[uint8](), DTypeOf[int32](), DTypeOf[int64](),
		DTypeOf[uint16](), DTypeOf[uint32](), DTypeOf[uint64](), DTypeOf[int16](),
		DTypeOf[bool](), DTypeOf[complex64](), DTypeOf[complex128]()}
	if fmt.Sprint(got) != fmt.Sprint(DTypes) {
		t.Errorf("DTypeOf = %v, want %v", got, DTypes)
	}
}

// fillTyped is fill for a Go slice: a Go bool must hold 0 or 1.
func fillTyped[T Element](r *rand.Rand, dt DType, s []T) {
	b := bytesOf(s)
	fill(r, dt, b)
	if dt == Bool {
		for i := range b {
			b[i] = min(b[i], 1)
		}
	}
}

func numberEntries[T Number]() map[Op]func(dst, src []T) {
	return map[Op]func(dst, src []T){Sum: SumInto[T], Prod: ProdInto[T], Min: MinInto[T], Max: MaxInto[T]}
}

func complexEntries[T Complex]() map[Op]func(dst, src []T) {
	return map[Op]func(dst, src []T){Sum: SumInto[T], Prod: ProdInto[T]}
}

// typedCase checks the generic entry points for one element type against
// Apply on the same bytes.
func typedCase[T Element](t *testing.T, r *rand.Rand, entries map[Op]func(dst, src []T)) {
	dt := DTypeOf[T]()
	for _, op := range Ops {
		for _, n := range testLens {
			dst, src := make([]T, n), make([]T, n)
			fillTyped(r, dt, dst)
			fillTyped(r, dt, src)
			want := bytes.Clone(bytesOf(dst))
			wantErr := Apply(dt, op, want, bytesOf(src))

			viaReduce := append([]T(nil), dst...)
			if err := Reduce(op, viaReduce, src); (err == nil) != (wantErr == nil) {
				t.Fatalf("Reduce[%v](%v) = %v, Apply = %v", dt, op, err, wantErr)
			}
			if wantErr != nil {
				continue
			}
			if i, ok := equalElems(dt, bytesOf(viaReduce), want); !ok {
				t.Fatalf("Reduce[%v](%v, n=%d) differs from Apply at %d", dt, op, n, i)
			}
			if f := entries[op]; f != nil {
				f(dst, src)
				if i, ok := equalElems(dt, bytesOf(dst), want); !ok {
					t.Fatalf("%vInto[%v](n=%d) differs from Apply at %d", op, dt, n, i)
				}
			}
		}
	}
	if err := Reduce(Sum, make([]T, 2), make([]T, 3)); err == nil {
		t.Errorf("Reduce[%v] with lengths 2, 3: no error", dt)
	}
	for op, f := range entries {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%vInto[%v] with lengths 2, 3 did not panic", op, dt)
				}
			}()
			f(make([]T, 2), make([]T, 3))
		}()
	}
}

func bitsCase[T Logical](t *testing.T, r *rand.Rand) {
	dt := DTypeOf[T]()
	for op, f := range map[Op]func(dst, src []T){BAnd: BAndInto[T], BOr: BOrInto[T], BXor: BXorInto[T]} {
		dst, src := make([]T, 1001), make([]T, 1001)
		fillTyped(r, dt, dst)
		fillTyped(r, dt, src)
		want := reference(dt, op, bytesOf(dst), bytesOf(src))
		f(dst, src)
		if !bytes.Equal(bytesOf(dst), want) {
			t.Errorf("%vInto[%v] differs from the reference", op, dt)
		}
	}
}

func scaleCase[T Float | Complex](t *testing.T, r *rand.Rand) {
	dt := DTypeOf[T]()
	dst := make([]T, 1001)
	fill(r, dt, bytesOf(dst))
	want := bytes.Clone(bytesOf(dst))
	if err := Scale(dt, want, 6); err != nil {
		t.Fatal(err)
	}
	ScaleSlice(dst, 6)
	if i, ok := equalElems(dt, bytesOf(dst), want); !ok {
		t.Errorf("ScaleSlice[%v] differs from Scale at %d", dt, i)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("ScaleSlice[%v] by 0 did not panic", dt)
		}
	}()
	ScaleSlice(dst, 0)
}

func TestTyped(t *testing.T) { forEachPath(t, testTyped) }

func testTyped(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	typedCase(t, r, numberEntries[float32]())
	typedCase(t, r, numberEntries[float64]())
	typedCase(t, r, numberEntries[F16]())
	typedCase(t, r, numberEntries[BF16]())
	typedCase(t, r, numberEntries[int8]())
	typedCase(t, r, numberEntries[uint8]())
	typedCase(t, r, numberEntries[int16]())
	typedCase(t, r, numberEntries[uint16]())
	typedCase(t, r, numberEntries[int32]())
	typedCase(t, r, numberEntries[uint32]())
	typedCase(t, r, numberEntries[int64]())
	typedCase(t, r, numberEntries[uint64]())
	typedCase(t, r, complexEntries[complex64]())
	typedCase(t, r, complexEntries[complex128]())
	typedCase(t, r, map[Op]func(dst, src []bool){Min: MinInto[bool], Max: MaxInto[bool]})
	bitsCase[int8](t, r)
	bitsCase[uint8](t, r)
	bitsCase[int16](t, r)
	bitsCase[uint16](t, r)
	bitsCase[int32](t, r)
	bitsCase[uint32](t, r)
	bitsCase[int64](t, r)
	bitsCase[uint64](t, r)
	bitsCase[bool](t, r)
	scaleCase[float32](t, r)
	scaleCase[float64](t, r)
	scaleCase[F16](t, r)
	scaleCase[BF16](t, r)
	scaleCase[complex64](t, r)
	scaleCase[complex128](t, r)
}

// TestSemantics pins the documented edge cases: NaN propagation in Min
// and Max, signed zeros, integer wrap-around, F16 rounding once.
func TestSemantics(t *testing.T) {
	nan := float32(math.NaN())
	d := []float32{nan, 1, 0, float32(math.Copysign(0, -1))}
	MinInto(d, []float32{1, nan, float32(math.Copysign(0, -1)), 0})
	if !isNaN32(d[0]) || !isNaN32(d[1]) || !math.Signbit(float64(d[2])) || !math.Signbit(float64(d[3])) {
		t.Errorf("MinInto: %v, want [NaN NaN -0 -0]", d)
	}
	d = []float32{nan, 1, 0, float32(math.Copysign(0, -1))}
	MaxInto(d, []float32{1, nan, float32(math.Copysign(0, -1)), 0})
	if !isNaN32(d[0]) || !isNaN32(d[1]) || math.Signbit(float64(d[2])) || math.Signbit(float64(d[3])) {
		t.Errorf("MaxInto: %v, want [NaN NaN 0 0]", d)
	}
	i8 := []int8{127, -128, 16}
	SumInto(i8, []int8{1, -1, 0})
	ProdInto(i8[2:], []int8{16})
	if fmt.Sprint(i8) != "[-128 127 0]" {
		t.Errorf("int8 wrap: %v, want [-128 127 0]", i8)
	}
	u64 := []uint64{math.MaxUint64, 0, 1 << 63, 3}
	SumInto(u64, []uint64{2, 0, 0, 0})
	ProdInto(u64[2:], []uint64{2, 1 << 63})
	MinInto(u64[1:2], []uint64{math.MaxUint64})
	if fmt.Sprint(u64) != "[1 0 0 9223372036854775808]" {
		t.Errorf("uint64 wrap: %v, want [1 0 0 9223372036854775808]", u64)
	}
	u16, i16 := []uint16{65535, 1}, []int16{32767, -32768}
	SumInto(u16, []uint16{1, 65535})
	SumInto(i16, []int16{1, -1})
	if fmt.Sprint(u16, i16) != "[0 0] [-32768 32767]" {
		t.Errorf("16-bit wrap: %v %v, want [0 0] [-32768 32767]", u16, i16)
	}
	u32 := []uint32{1 << 31, 7}
	MaxInto(u32, []uint32{1, 1 << 31}) // unsigned order: 1<<31 is the larger
	if fmt.Sprint(u32) != "[2147483648 2147483648]" {
		t.Errorf("uint32 max: %v, want [2147483648 2147483648]", u32)
	}
	b := []bool{false, false, true, true}
	for _, c := range []struct {
		name string
		f    func(dst, src []bool)
		want string
	}{
		{"min", MinInto[bool], "[false false false true]"},
		{"max", MaxInto[bool], "[false true true true]"},
		{"band", BAndInto[bool], "[false false false true]"},
		{"bor", BOrInto[bool], "[false true true true]"},
		{"bxor", BXorInto[bool], "[false true true false]"},
	} {
		d := slices.Clone(b)
		c.f(d, []bool{false, true, false, true})
		if fmt.Sprint(d) != c.want {
			t.Errorf("bool %s: %v, want %s", c.name, d, c.want)
		}
	}
	// A byte that is neither 0 nor 1, from a peer, counts as true, and the
	// result is 0 or 1.
	raw := []byte{2, 0x80, 0, 0xff}
	if err := Apply(Bool, BAnd, raw, []byte{1, 0x40, 3, 0}); err != nil || fmt.Sprint(raw) != "[1 1 0 0]" {
		t.Errorf("bool band on raw bytes: %v, %v; want [1 1 0 0]", raw, err)
	}
	raw = []byte{2, 0x80, 0, 0}
	if err := Apply(Bool, BXor, raw, []byte{1, 0, 3, 0}); err != nil || fmt.Sprint(raw) != "[0 1 1 0]" {
		t.Errorf("bool bxor on raw bytes: %v, %v; want [0 1 1 0]", raw, err)
	}
	if err := Reduce(Sum, []bool{true}, []bool{true}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Reduce(sum) on bool = %v, want ErrUnsupported", err)
	}
	if err := Reduce(Max, []complex64{1}, []complex64{2}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Reduce(max) on complex64 = %v, want ErrUnsupported", err)
	}
	c := []complex128{complex(1, 2), complex(math.Copysign(0, -1), 3)}
	ProdInto(c[:1], []complex128{complex(3, -1)}) // (1+2i)(3-i) = 5+5i
	ScaleSlice(c[1:], 2)                          // -0 stays -0: the parts are divided
	if c[0] != complex(5, 5) || !math.Signbit(real(c[1])) || imag(c[1]) != 1.5 {
		t.Errorf("complex128: %v, want [(5+5i) (-0+1.5i)]", c)
	}

	// 2048 + 1 is a tie in float16 and rounds to even (2048); 2048 + 3
	// rounds up to 2052.
	h := []F16{F16FromFloat32(2048), F16FromFloat32(2048)}
	SumInto(h, []F16{F16FromFloat32(1), F16FromFloat32(3)})
	if h[0].Float32() != 2048 || h[1].Float32() != 2052 {
		t.Errorf("F16 sums: %v, want [2048 2052]", h)
	}
}

func TestHostKernel(t *testing.T) {
	var k Kernel = Host{}
	d, s := bytesOf([]int32{1, 2}), bytesOf([]int32{3, 4})
	if err := k.Reduce(Int32, Sum, d, s); err != nil || fmt.Sprint(bytesAs[int32](d)) != "[4 6]" {
		t.Errorf("Host.Reduce: %v, %v", bytesAs[int32](d), err)
	}
	if err := k.Reduce(Int32, Avg, d, s); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Host.Reduce(int32, avg) = %v, want ErrUnsupported", err)
	}
	if err := k.Scale(Int32, d, 2); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Host.Scale(int32) = %v, want ErrUnsupported", err)
	}
}

// TestSIMDMatchesPureGo compares the assembly Sum with the pure-Go loop
// it stands for, at every length up to 300 and at every element offset
// within a cache line (unaligned starts).
func TestSIMDMatchesPureGo(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD path on this machine")
	}
	defer func(saved bool) { useSIMD = saved }(useSIMD)
	r := rand.New(rand.NewPCG(9, 10))
	for _, dt := range []DType{Float32, Float64} {
		for n := 0; n <= 300; n++ {
			off := n % (64 / dt.Size())
			all, dst := guarded(dt, n+off)
			dst = dst[off*dt.Size():]
			src := make([]byte, (n+1)*dt.Size())[dt.Size()/2:][:n*dt.Size()] // misaligned
			fill(r, dt, dst)
			fill(r, dt, src)
			want := bytes.Clone(dst)
			switch dt {
			case Float32:
				sumLoop(bytesAs[float32](want), bytesAs[float32](src))
				useSIMD = true
				sumFloat32(bytesAs[float32](dst), bytesAs[float32](src))
			case Float64:
				sumLoop(bytesAs[float64](want), bytesAs[float64](src))
				useSIMD = true
				sumFloat64(bytesAs[float64](dst), bytesAs[float64](src))
			}
			checkGuards(t, dt, all)
			if i, ok := equalElems(dt, dst, want); !ok {
				t.Fatalf("%v n=%d: SIMD element %d = %v, pure Go %v", dt, n, i, get(dt, dst, i), get(dt, want, i))
			}
		}
	}
}

// TestDTypeNames pins the names and sizes (torch's spellings), that
// ParseDType reads every name back, and the numeric values, which travel
// in fingerprints and headers and must never change.
func TestDTypeNames(t *testing.T) {
	want := []struct {
		name string
		size int
	}{
		{"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2},
		{"int8", 1}, {"uint8", 1}, {"int32", 4}, {"int64", 8},
		{"uint16", 2}, {"uint32", 4}, {"uint64", 8}, {"int16", 2},
		{"bool", 1}, {"complex64", 8}, {"complex128", 16},
	}
	if len(DTypes) != len(want) {
		t.Fatalf("%d DTypes, want %d", len(DTypes), len(want))
	}
	for i, dt := range DTypes {
		if uint8(dt) != uint8(i+1) {
			t.Errorf("%v = %d, want %d", dt, uint8(dt), i+1)
		}
		if dt.String() != want[i].name || dt.Size() != want[i].size {
			t.Errorf("DType %d: %q of %d bytes, want %q of %d", uint8(dt), dt.String(), dt.Size(), want[i].name, want[i].size)
		}
		if p, err := ParseDType(strings.ToUpper(dt.String())); err != nil || p != dt {
			t.Errorf("ParseDType(%q) = %v, %v", dt.String(), p, err)
		}
	}
	if s := DType(16).String(); s != "DType(16)" {
		t.Errorf("DType(16).String() = %q", s)
	}
	if DType(16).Valid() || DType(16).Size() != 0 {
		t.Error("DType(16) is valid")
	}
}

// Every dtype and op has its function made once, and it is Apply.
func TestHostFunc(t *testing.T) {
	for _, dt := range DTypes {
		for _, op := range Ops {
			f := HostFunc(dt, op)
			if f == nil {
				t.Fatalf("no function for %v %v", dt, op)
			}
			dst, src := make([]byte, 2*dt.Size()), make([]byte, 2*dt.Size())
			if err, want := f(dst, src), Apply(dt, op, make([]byte, 2*dt.Size()), src); (err == nil) != (want == nil) {
				t.Errorf("%v %v: %v, Apply says %v", dt, op, err, want)
			}
		}
	}
	if HostFunc(0, Sum) != nil || HostFunc(Float32, 0) != nil || HostFunc(200, Sum) != nil {
		t.Error("a function for an invalid dtype or op")
	}
}
