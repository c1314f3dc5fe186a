package kernels_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

// The emulator tests run the kernels' own CUDA source on the CPU: emu/
// driver.cc compiled with clang++ and emu/cuda_host.h (see emu/README.md),
// checked against the host references reduceop.Apply and reduceop.Scale
// and the onebit loops documented on kernels.OneBit*.

// emulator is a running emu/driver.cc.
type emulator struct {
	in  io.WriteCloser
	w   *bufio.Writer
	r   *bufio.Reader
	cmd *exec.Cmd
}

// startEmulator builds the driver into a temporary directory and starts
// it. Without clang++ it skips, unless CI=true, where it fails: CI must
// run the kernels.
func startEmulator(t *testing.T) *emulator {
	t.Helper()
	cxx := os.Getenv("CLANGXX")
	if cxx == "" {
		cxx = "clang++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is missing: the kernel emulator cannot run (install clang, or set CLANGXX)", cxx)
		}
		t.Skipf("skipping the kernel emulator: %s not found (install clang, or set CLANGXX)", cxx)
	}
	bin := filepath.Join(t.TempDir(), "driver")
	flags := []string{"-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Werror"}
	// EMU_CXXFLAGS adds flags, e.g. -DEMU_UCONTEXT to check the portable
	// fiber switch on x86-64 too.
	flags = append(flags, strings.Fields(os.Getenv("EMU_CXXFLAGS"))...)
	flags = append(flags, "-include", filepath.Join("emu", "cuda_host.h"), filepath.Join("emu", "driver.cc"), "-o", bin)
	build := exec.Command(cxx, flags...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the emulator: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the emulator: %v", err)
	}
	e := &emulator{in: in, w: bufio.NewWriterSize(in, 1<<16), r: bufio.NewReaderSize(out, 1<<16), cmd: cmd}
	t.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("emulator exit: %v", err)
		}
	})
	return e
}

// ebuf is a kernel buffer placed off bytes past a 64-byte boundary.
type ebuf struct {
	off  int
	data []byte
}

// earg is a kernel argument: buffer number buf, or the scalar val.
type earg struct {
	buf   int
	val   uint64
	isBuf bool
}

func bufArg(i int) earg         { return earg{buf: i, isBuf: true} }
func valArg(v uint64) earg      { return earg{val: v} }
func u32s(v uint32) []byte      { return binary.LittleEndian.AppendUint32(nil, v) }
func f32Bytes(f float32) []byte { return u32s(math.Float32bits(f)) }

// run launches kernel name on grid blocks and returns the buffers'
// contents afterwards. The driver fails the launch when a kernel writes
// within 64 bytes outside a buffer, or when threads deadlock.
func (e *emulator) run(t *testing.T, name string, grid int, bufs []ebuf, args ...earg) [][]byte {
	t.Helper()
	le := binary.LittleEndian
	var req []byte
	req = le.AppendUint32(req, uint32(len(name)))
	req = append(req, name...)
	req = le.AppendUint32(req, uint32(grid))
	req = le.AppendUint32(req, uint32(len(bufs)))
	for _, b := range bufs {
		req = le.AppendUint32(req, uint32(b.off))
		req = le.AppendUint64(req, uint64(len(b.data)))
		req = append(req, b.data...)
	}
	req = le.AppendUint32(req, uint32(len(args)))
	for _, a := range args {
		if a.isBuf {
			req = le.AppendUint32(req, 0)
			req = le.AppendUint64(req, uint64(a.buf))
		} else {
			req = le.AppendUint32(req, 1)
			req = le.AppendUint64(req, a.val)
		}
	}
	if _, err := e.w.Write(req); err != nil {
		t.Fatalf("%s: writing to the emulator: %v", name, err)
	}
	if err := e.w.Flush(); err != nil {
		t.Fatalf("%s: writing to the emulator: %v", name, err)
	}
	var status uint32
	if err := binary.Read(e.r, le, &status); err != nil {
		t.Fatalf("%s: reading from the emulator: %v (did it crash? see its stderr above)", name, err)
	}
	if status != 0 {
		var n uint32
		if err := binary.Read(e.r, le, &n); err != nil {
			t.Fatalf("%s: reading from the emulator: %v (did it crash? see its stderr above)", name, err)
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(e.r, msg); err != nil {
			t.Fatalf("%s: reading from the emulator: %v (did it crash? see its stderr above)", name, err)
		}
		t.Fatalf("emulated launch of %s on %d blocks failed: %s", name, grid, msg)
	}
	res := make([][]byte, len(bufs))
	for i, b := range bufs {
		res[i] = make([]byte, len(b.data))
		if _, err := io.ReadFull(e.r, res[i]); err != nil {
			t.Fatalf("%s: reading from the emulator: %v (did it crash? see its stderr above)", name, err)
		}
	}
	return res
}

// The element counts every kernel is run at; emuLarge more rarely.
var emuCounts = []int{0, 1, 7, 8, 31, 32, 33, 4095, 4096, 4097}

const emuLarge = 1 << 20

// grids returns the launch grids for work of the given number of items
// (one a thread): one block, as many as device/cuda would launch on a
// big enough GPU, and more blocks than there is work.
func grids(items int) []int {
	exact := max(1, (items+kernels.BlockSize-1)/kernels.BlockSize)
	return slices.Compact([]int{1, exact, 2*exact + 3})
}

// randFloat32Bits returns random float32 bits: mostly numbers within a few
// orders of magnitude of 1 (so sums and products stay interesting), and
// one in eight a special: NaN, ±0, ±Inf, a subnormal, the largest finite.
func randFloat32Bits(r *rand.Rand) uint32 {
	sign := r.Uint32() & 0x80000000
	switch r.IntN(64) {
	case 0:
		return 0x7fc00000 | r.Uint32()&0x3fffff | sign // quiet NaN, random payload
	case 1:
		return 0x7f800001 | sign // signalling NaN
	case 2, 3:
		return sign // ±0
	case 4:
		return 0x7f800000 | sign // ±Inf
	case 5, 6:
		return r.Uint32()&0x7fffff | sign // subnormal (or zero)
	case 7:
		return 0x7f7fffff | sign
	case 8:
		return r.Uint32() // anything
	}
	exp := uint32(127 - 12 + r.IntN(25))
	return sign | exp<<23 | r.Uint32()&0x7fffff
}

func randFloat64Bits(r *rand.Rand) uint64 {
	sign := r.Uint64() & (1 << 63)
	switch r.IntN(64) {
	case 0:
		return 0x7ff8000000000000 | r.Uint64()&0x7ffffffffffff | sign
	case 1:
		return 0x7ff0000000000001 | sign
	case 2, 3:
		return sign
	case 4:
		return 0x7ff0000000000000 | sign
	case 5, 6:
		return r.Uint64()&0xfffffffffffff | sign
	case 7:
		return 0x7fefffffffffffff | sign
	case 8:
		return r.Uint64()
	}
	exp := uint64(1023 - 12 + r.IntN(25))
	return sign | exp<<52 | r.Uint64()&0xfffffffffffff
}

func randF16Bits(r *rand.Rand) uint16 {
	sign := uint16(r.Uint32()) & 0x8000
	switch r.IntN(64) {
	case 0:
		return 0x7e00 | uint16(r.Uint32())&0x1ff | sign
	case 1:
		return 0x7c01 | sign
	case 2, 3:
		return sign
	case 4:
		return 0x7c00 | sign
	case 5, 6:
		return uint16(r.Uint32())&0x3ff | sign
	case 7:
		return 0x7bff | sign
	case 8:
		return uint16(r.Uint32())
	}
	exp := uint16(15 - 6 + r.IntN(13))
	return sign | exp<<10 | uint16(r.Uint32())&0x3ff
}

// randElems returns n random elements of dt as bytes.
func randElems(r *rand.Rand, dt reduceop.DType, n int) []byte {
	le := binary.LittleEndian
	b := make([]byte, n*dt.Size())
	switch dt {
	case reduceop.Float32:
		for i := 0; i < len(b); i += 4 {
			le.PutUint32(b[i:], randFloat32Bits(r))
		}
	case reduceop.Float64:
		for i := 0; i < len(b); i += 8 {
			le.PutUint64(b[i:], randFloat64Bits(r))
		}
	case reduceop.Float16:
		for i := 0; i < len(b); i += 2 {
			le.PutUint16(b[i:], randF16Bits(r))
		}
	case reduceop.BFloat16:
		for i := 0; i < len(b); i += 2 {
			le.PutUint16(b[i:], uint16(randFloat32Bits(r)>>16))
		}
	default:
		for i := 0; i < len(b); i += 8 {
			var w [8]byte
			le.PutUint64(w[:], r.Uint64())
			copy(b[i:], w[:])
		}
	}
	return b
}

// isNaN reports whether element i of the dt buffer b is a NaN.
func isNaN(dt reduceop.DType, b []byte, i int) bool {
	le := binary.LittleEndian
	switch dt {
	case reduceop.Float32:
		return le.Uint32(b[4*i:])&0x7fffffff > 0x7f800000
	case reduceop.Float64:
		return le.Uint64(b[8*i:])&(1<<63-1) > 0x7ff0000000000000
	case reduceop.Float16:
		return le.Uint16(b[2*i:])&0x7fff > 0x7c00
	case reduceop.BFloat16:
		return le.Uint16(b[2*i:])&0x7fff > 0x7f80
	}
	return false
}

// diffElems returns a description of the first element where got differs
// from want: bits must be equal, except that a NaN matches any NaN (its
// payload is the hardware's business).
func diffElems(dt reduceop.DType, got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	if bytes.Equal(got, want) {
		return ""
	}
	sz := dt.Size()
	for i := 0; i < len(want)/sz; i++ {
		g, w := got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz]
		if string(g) == string(w) || (isNaN(dt, got, i) && isNaN(dt, want, i)) {
			continue
		}
		return fmt.Sprintf("element %d of %d = % x, want % x", i, len(want)/sz, g, w)
	}
	return ""
}

func TestEmulator(t *testing.T) {
	e := startEmulator(t)

	t.Run("EntryPoints", func(t *testing.T) {
		out, err := exec.Command(e.cmd.Path, "-list").Output()
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Fields(string(out))
		want := kernels.EntryPoints()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("driver -list = %v,\nkernels.EntryPoints() = %v", got, want)
		}
	})
	t.Run("Reduce", func(t *testing.T) { testEmuReduce(t, e) })
	t.Run("Scale", func(t *testing.T) { testEmuScale(t, e) })
	t.Run("OneBitCompensateSumSq", func(t *testing.T) { testEmuCompensate(t, e) })
	t.Run("OneBitFinish", func(t *testing.T) { testEmuFinish(t, e) })
	for _, name := range []string{kernels.OneBitPackUpdate, kernels.OneBitPackUpdateBallot} {
		t.Run(name, func(t *testing.T) { testEmuPack(t, e, name) })
	}
	t.Run("OneBitUnpack", func(t *testing.T) { testEmuUnpack(t, e) })
}

// offsetPairs returns the (dst, src) byte offsets to place buffers of
// elements of size sz at: every multiple of sz in 0..15 for both together,
// and each against 0 (which differ in alignment and take the scalar path).
func offsetPairs(sz int) [][2]int {
	var p [][2]int
	for o := 0; o < 16; o += sz {
		p = append(p, [2]int{o, o})
		if o != 0 {
			p = append(p, [2]int{o, 0}, [2]int{0, o})
		}
	}
	return p
}

func testEmuReduce(t *testing.T, e *emulator) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dt := range kernels.DTypes {
		for _, op := range reduceop.Ops {
			if op == reduceop.Avg || reduceop.Check(op, dt) != nil {
				continue
			}
			name, err := kernels.ReduceKernelName(dt, op)
			if err != nil {
				t.Fatal(err)
			}
			sz := dt.Size()
			counts := emuCounts
			if op == reduceop.Sum {
				counts = append(slices.Clone(counts), emuLarge)
			}
			for _, n := range counts {
				vec := (n*sz + 15) / 16
				offs := offsetPairs(sz)
				gs := grids(vec + 1)
				if n == emuLarge {
					offs = [][2]int{{0, 0}, {sz, sz}}
					gs = []int{gs[1]}
				} else if op != reduceop.Sum {
					// The element loop is the same for every op: the full
					// sweep of offsets runs for sum, the others check the
					// arithmetic at two alignments.
					offs = [][2]int{{0, 0}, {sz, sz}}
				}
				for _, off := range offs {
					for _, g := range gs {
						dst, src := randElems(r, dt, n), randElems(r, dt, n)
						want := slices.Clone(dst)
						if err := reduceop.Apply(dt, op, want, slices.Clone(src)); err != nil {
							t.Fatal(err)
						}
						res := e.run(t, name, g, []ebuf{{off[0], dst}, {off[1], src}},
							bufArg(0), bufArg(1), valArg(uint64(n)))
						if d := diffElems(dt, res[0], want); d != "" {
							t.Fatalf("%s n=%d offsets %v grid %d: dst %s", name, n, off, g, d)
						}
						if string(res[1]) != string(src) {
							t.Fatalf("%s n=%d offsets %v grid %d: src changed", name, n, off, g)
						}
					}
				}
			}
		}
	}
}

func testEmuScale(t *testing.T, e *emulator) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range kernels.DTypes {
		name, err := kernels.ScaleKernelName(dt)
		if err != nil {
			continue
		}
		sz := dt.Size()
		for _, n := range append(slices.Clone(emuCounts), emuLarge) {
			vec := (n*sz + 15) / 16
			gs := grids(vec + 1)
			offs := []int{}
			for o := 0; o < 16; o += sz {
				offs = append(offs, o)
			}
			if n == emuLarge {
				offs, gs = []int{0, sz}, []int{gs[1]}
			}
			for _, off := range offs {
				for _, g := range gs {
					div := 1 + r.IntN(9)
					x := randElems(r, dt, n)
					want := slices.Clone(x)
					if err := reduceop.Scale(dt, want, div); err != nil {
						t.Fatal(err)
					}
					res := e.run(t, name, g, []ebuf{{off, x}}, bufArg(0), valArg(uint64(n)), valArg(uint64(div)))
					if d := diffElems(dt, res[0], want); d != "" {
						t.Fatalf("%s n=%d /%d offset %d grid %d: %s", name, n, div, off, g, d)
					}
				}
			}
		}
	}
}

// float32s and float32Bytes convert between []float32 and its bytes.
func float32s(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

func float32Bytes(f []float32) []byte {
	b := make([]byte, 0, 4*len(f))
	for _, x := range f {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// randFinite32 returns n random finite float32s, zeros and subnormals
// included, as bytes: their sum of squares is a number.
func randFinite32(r *rand.Rand, n int) []byte {
	b := make([]byte, 0, 4*n)
	for len(b) < 4*n {
		x := randFloat32Bits(r)
		if x&0x7f800000 == 0x7f800000 || x&0x7fffffff == 0x7f7fffff {
			continue
		}
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

// closeSS reports whether a sum of squares from the device matches the
// host's: the same special value, or within a relative 1e-6. The kernels
// add the float64 squares in another order than onebit.HostKernel (per
// thread, then a shuffle tree per warp and block, then the partials),
// which changes the rounding of the float64 sum by at most about
// n * 2^-53 relative (1.2e-10 at n = 2^20): 1e-6 leaves a wide margin and
// still catches a missing or doubled element.
func closeSS(got, want float64) bool {
	switch {
	case math.IsNaN(want):
		return math.IsNaN(got)
	case math.IsInf(want, 0) || want == 0:
		return got == want
	}
	return math.Abs(got-want) <= 1e-6*want
}

func testEmuCompensate(t *testing.T, e *emulator) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range append(slices.Clone(emuCounts), emuLarge) {
		gs := grids((n + 3) / 4)
		offs := [][2]int{{0, 0}, {4, 4}, {8, 8}, {12, 12}, {4, 0}, {0, 12}}
		if n == emuLarge {
			offs, gs = offs[:2], []int{gs[1]}
		}
		for _, off := range offs {
			for _, g := range gs {
				for _, nx := range slices.Compact([]int{n, n / 2, max(0, n-5)}) {
					errb, x := randFinite32(r, n), randFinite32(r, nx)
					if r.IntN(4) == 0 {
						errb = randElems(r, reduceop.Float32, n) // NaN and Inf too
					}
					want := float32s(errb)
					wantSS := onebit.HostKernel{}.CompensateNorm(want, float32s(x))
					partial := make([]byte, 8*g)
					for i := range partial {
						partial[i] = 0xff // NaN: every block must write its own
					}
					res := e.run(t, kernels.OneBitCompensateSumSq, g,
						[]ebuf{{off[0], errb}, {off[1], x}, {0, partial}},
						bufArg(0), bufArg(1), valArg(uint64(nx)), valArg(uint64(n)), bufArg(2))
					if d := diffElems(reduceop.Float32, res[0], float32Bytes(want)); d != "" {
						t.Fatalf("n=%d nx=%d offsets %v grid %d: err %s", n, nx, off, g, d)
					}
					var ss float64
					for i := range g {
						ss += math.Float64frombits(binary.LittleEndian.Uint64(res[2][8*i:]))
					}
					if !closeSS(ss, wantSS) {
						t.Fatalf("n=%d nx=%d offsets %v grid %d: sum of the partials %v, want %v", n, nx, off, g, ss, wantSS)
					}
				}
			}
		}
	}
}

func testEmuFinish(t *testing.T, e *emulator) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, parts := range []int{1, 2, 31, 255, 256, 257, 1000} {
		for _, n := range []int{1, 7, 4096, 1 << 30} {
			partial := make([]byte, 0, 8*parts)
			var want float64
			for range parts {
				p := r.Float64() * math.Ldexp(1, r.IntN(40)-20)
				want += p
				partial = binary.LittleEndian.AppendUint64(partial, math.Float64bits(p))
			}
			res := e.run(t, kernels.OneBitFinish, 1, []ebuf{{0, partial}, {0, make([]byte, 8)}, {4, make([]byte, 4)}},
				bufArg(0), valArg(uint64(parts)), valArg(uint64(n)), bufArg(1), bufArg(2))
			ss := math.Float64frombits(binary.LittleEndian.Uint64(res[1]))
			if !closeSS(ss, want) {
				t.Fatalf("%d partials, n=%d: ss = %v, want %v", parts, n, ss, want)
			}
			// onebit's rms, from the kernel's own ss: bit for bit.
			wantScale := float32(math.Sqrt(ss)) / float32(math.Sqrt(float64(n)))
			if got := math.Float32frombits(binary.LittleEndian.Uint32(res[2])); got != wantScale {
				t.Fatalf("%d partials, n=%d: scale = %v, want %v", parts, n, got, wantScale)
			}
		}
	}
}

// randScale returns a positive float32 scale as a 4-byte buffer.
func randScale(r *rand.Rand) (float32, []byte) {
	s := float32(r.Float64()*2 + 1e-3)
	return s, f32Bytes(s)
}

func testEmuPack(t *testing.T, e *emulator, name string) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range append(slices.Clone(emuCounts), emuLarge) {
		errOffs, bitsOffs := []int{0, 4, 8, 12}, []int{0, 1, 2, 3, 4, 8, 13}
		gs := grids((n + 7) / 8)
		if name == kernels.OneBitPackUpdateBallot {
			gs = slices.Compact(append(gs, grids(n)...))
		}
		if n == emuLarge {
			errOffs, bitsOffs, gs = []int{0, 4}, []int{0, 1}, []int{gs[1]}
		}
		for _, eo := range errOffs {
			for _, bo := range bitsOffs {
				for _, g := range gs {
					errb := randElems(r, reduceop.Float32, n)
					s, sb := randScale(r)
					want := float32s(errb)
					wantBits := make([]byte, onebit.PackedLen(n))
					onebit.HostKernel{}.PackUpdate(wantBits, want, s)
					bits := make([]byte, onebit.PackedLen(n))
					for i := range bits {
						bits[i] = 0x5a // every byte must be written
					}
					res := e.run(t, name, g, []ebuf{{bo, bits}, {eo, errb}, {0, sb}},
						bufArg(0), bufArg(1), valArg(uint64(n)), bufArg(2))
					if string(res[0]) != string(wantBits) {
						t.Fatalf("n=%d err offset %d bits offset %d grid %d: bits\n% x, want\n% x", n, eo, bo, g, head(res[0]), head(wantBits))
					}
					if d := diffElems(reduceop.Float32, res[1], float32Bytes(want)); d != "" {
						t.Fatalf("n=%d err offset %d bits offset %d grid %d: err %s", n, eo, bo, g, d)
					}
				}
			}
		}
	}
}

// head returns at most the first 16 bytes of b, for messages.
func head(b []byte) []byte { return b[:min(len(b), 16)] }

func testEmuUnpack(t *testing.T, e *emulator) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, name := range []string{kernels.OneBitAccumulateSigns, kernels.OneBitDecompress} {
		for _, n := range append(slices.Clone(emuCounts), emuLarge) {
			dstOffs, bitsOffs := []int{0, 4, 8, 12}, []int{0, 1, 3}
			gs := grids((n + 7) / 8)
			if n == emuLarge {
				dstOffs, bitsOffs, gs = []int{0, 4}, []int{0}, []int{gs[1]}
			}
			for _, do := range dstOffs {
				for _, bo := range bitsOffs {
					for _, g := range gs {
						dst := randElems(r, reduceop.Float32, n)
						bits := randElems(r, reduceop.Uint8, onebit.PackedLen(n))
						s, sb := randScale(r)
						want := float32s(dst)
						if name == kernels.OneBitDecompress {
							onebit.HostKernel{}.Decompress(want, bits, s)
						} else {
							onebit.HostKernel{}.AccumulateSigns(want, bits, s)
						}
						res := e.run(t, name, g, []ebuf{{do, dst}, {bo, bits}, {0, sb}},
							bufArg(0), bufArg(1), valArg(uint64(n)), bufArg(2))
						if d := diffElems(reduceop.Float32, res[0], float32Bytes(want)); d != "" {
							t.Fatalf("%s n=%d dst offset %d bits offset %d grid %d: %s", name, n, do, bo, g, d)
						}
						if string(res[1]) != string(bits) {
							t.Fatalf("%s n=%d: bits changed", name, n)
						}
					}
				}
			}
		}
	}
}
