package kernels_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
)

var headerRE = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

func TestHeader(t *testing.T) {
	first, _, _ := strings.Cut(string(kernels.PTX()), "\n")
	if !headerRE.MatchString(first) {
		t.Fatalf("first line of goccl.ptx = %q, want a %q line", first, headerRE)
	}
	for _, want := range []string{"\n.version 6.4\n", "\n.target sm_70\n", "\n.address_size 64\n"} {
		if !strings.Contains(string(kernels.PTX()), want) {
			t.Errorf("goccl.ptx lacks %q", strings.TrimSpace(want))
		}
	}
}

// entries maps each .visible .entry in the PTX to its body.
func entries(t *testing.T) map[string]string {
	t.Helper()
	src := string(kernels.PTX())
	re := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)
	locs := re.FindAllStringSubmatchIndex(src, -1)
	m := make(map[string]string, len(locs))
	for i, loc := range locs {
		end := len(src)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		name := src[loc[2]:loc[3]]
		if _, dup := m[name]; dup {
			t.Errorf("entry %s appears twice", name)
		}
		m[name] = src[loc[0]:end]
	}
	return m
}

func TestEntryPoints(t *testing.T) {
	got := entries(t)
	want := kernels.EntryPoints()
	// 8 dtypes × {sum prod min max}, 4 integer dtypes × {band bor bxor},
	// 4 float dtypes × scale, 5 onebit steps plus a second packing kernel.
	if n := 8*4 + 4*3 + 4 + 6; len(want) != n {
		t.Errorf("EntryPoints() has %d names, want %d", len(want), n)
	}
	for _, name := range want {
		body, ok := got[name]
		if !ok {
			t.Errorf("goccl.ptx has no .visible .entry %s", name)
			continue
		}
		if !strings.Contains(body, fmt.Sprintf(".maxntid %d, 1, 1", kernels.BlockSize)) {
			t.Errorf("%s: not compiled for %d threads per block", name, kernels.BlockSize)
		}
		if strings.Contains(body, ".local") {
			t.Errorf("%s: uses local memory (register spill or indexed array)", name)
		}
		delete(got, name)
	}
	for name := range got {
		t.Errorf("goccl.ptx has entry %s that EntryPoints does not list", name)
	}
}

// TestWideLoads checks that every elementwise kernel moves its data with
// 16-byte loads and stores, and never with narrower vector ones (which LLVM
// emits when it splits a vector of small elements).
func TestWideLoads(t *testing.T) {
	wide := regexp.MustCompile(`\.v4\.(f32|u32|b32|s32)|\.v2\.(f64|u64|b64|s64)`)
	vecop := regexp.MustCompile(`(?m)^\s*(ld|st)\.global(\.nc)?(\.v\d\.\w+)`)
	// The minimum number of 16-byte global loads and stores per kernel.
	want := map[string][2]int{
		kernels.OneBitCompensateSumSq: {2, 1},
		kernels.OneBitFinish:          {0, 0},
		kernels.OneBitPackUpdate:      {2, 2},
		// One float per lane (a warp reads 128 contiguous bytes), one
		// 4-byte word of bits per warp.
		kernels.OneBitPackUpdateBallot: {0, 0},
		kernels.OneBitAccumulateSigns:  {2, 2},
		kernels.OneBitDecompress:       {0, 2},
	}
	for name, body := range entries(t) {
		w, ok := want[name]
		switch {
		case ok:
		case strings.HasPrefix(name, "goccl_reduce_"):
			w = [2]int{2, 1}
		case strings.HasPrefix(name, "goccl_scale_"):
			w = [2]int{1, 1}
		default:
			t.Errorf("%s: no expectation", name)
		}
		var n [2]int
		for _, m := range vecop.FindAllStringSubmatch(body, -1) {
			if !wide.MatchString(m[3]) {
				t.Errorf("%s: narrow vector access %s", name, strings.TrimSpace(m[0]))
				continue
			}
			if m[1] == "ld" {
				n[0]++
			} else {
				n[1]++
			}
		}
		if n[0] < w[0] || n[1] < w[1] {
			t.Errorf("%s: %d 16-byte loads and %d stores, want at least %d and %d", name, n[0], n[1], w[0], w[1])
		}
	}
}

func TestReduceKernelName(t *testing.T) {
	tests := []struct {
		dt      reduceop.DType
		op      reduceop.Op
		want    string
		wantErr bool
	}{
		{reduceop.Float32, reduceop.Sum, "goccl_reduce_f32_sum", false},
		{reduceop.Float32, reduceop.Avg, "goccl_reduce_f32_sum", false},
		{reduceop.BFloat16, reduceop.Max, "goccl_reduce_bf16_max", false},
		{reduceop.Float16, reduceop.Prod, "goccl_reduce_f16_prod", false},
		{reduceop.Float64, reduceop.Min, "goccl_reduce_f64_min", false},
		{reduceop.Int8, reduceop.BXor, "goccl_reduce_i8_bxor", false},
		{reduceop.Uint8, reduceop.BAnd, "goccl_reduce_u8_band", false},
		{reduceop.Int64, reduceop.BOr, "goccl_reduce_i64_bor", false},
		{reduceop.Int32, reduceop.Avg, "", true},
		{reduceop.Float32, reduceop.BXor, "", true},
		{reduceop.DType(0), reduceop.Sum, "", true},
		{reduceop.Float32, reduceop.Op(0), "", true},
	}
	for _, tt := range tests {
		got, err := kernels.ReduceKernelName(tt.dt, tt.op)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ReduceKernelName(%v, %v) = %q, %v; want %q, error %v", tt.dt, tt.op, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := kernels.ReduceKernelName(reduceop.Int32, reduceop.Avg); !errors.Is(err, reduceop.ErrUnsupported) {
		t.Errorf("ReduceKernelName(int32, avg) error = %v, want one wrapping ErrUnsupported", err)
	}
}

func TestScaleKernelName(t *testing.T) {
	for _, dt := range reduceop.DTypes {
		name, err := kernels.ScaleKernelName(dt)
		if dt.IsFloat() != (err == nil) {
			t.Errorf("ScaleKernelName(%v) = %q, %v", dt, name, err)
		}
		if err != nil && !errors.Is(err, reduceop.ErrUnsupported) {
			t.Errorf("ScaleKernelName(%v) error %v does not wrap ErrUnsupported", dt, err)
		}
	}
}

// TestRegenerate runs gen.sh into a temporary directory and compares the
// result with the committed goccl.ptx, when the clang that made it is here.
func TestRegenerate(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping PTX regeneration in -short mode")
	}
	clang := os.Getenv("CLANG")
	if clang == "" {
		clang = "clang"
	}
	if _, err := exec.LookPath(clang); err != nil {
		t.Skipf("skipping: %s not found; cannot check that goccl.ptx matches kernels/*.cu", clang)
	}
	out, err := exec.Command(clang, "--version").Output()
	if err != nil {
		t.Skipf("skipping: %s --version: %v", clang, err)
	}
	m := regexp.MustCompile(`clang version (\d+)\.`).FindSubmatch(out)
	first, _, _ := strings.Cut(string(kernels.PTX()), "\n")
	if m == nil || !strings.Contains(first, " clang "+string(m[1])+";") {
		t.Skipf("skipping: goccl.ptx was made by another clang (%q); this is %s", first, bytes.TrimSpace(out))
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "gen.sh", dir)
	cmd.Env = append(os.Environ(), "CLANG="+clang)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "goccl.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, kernels.PTX()) {
		t.Fatalf("goccl.ptx is stale: run go generate ./kernels and commit the result")
	}
}

func ExampleReduceKernelName() {
	name, err := kernels.ReduceKernelName(reduceop.BFloat16, reduceop.Avg)
	fmt.Println(name, err)
	_, err = kernels.ReduceKernelName(reduceop.Int32, reduceop.Avg)
	fmt.Println(errors.Is(err, reduceop.ErrUnsupported))
	// Output:
	// goccl_reduce_bf16_sum <nil>
	// true
}

// TestDTypesFixed pins the dtypes with kernels: the eight goccl.ptx was
// generated for, whatever reduceop adds. A dtype without a kernel is
// refused, wrapping ErrUnsupported, exactly where device.CheckReduce
// refuses it.
func TestDTypesFixed(t *testing.T) {
	want := []reduceop.DType{reduceop.Float32, reduceop.Float64, reduceop.Float16, reduceop.BFloat16,
		reduceop.Int8, reduceop.Uint8, reduceop.Int32, reduceop.Int64}
	if !slices.Equal(kernels.DTypes, want) {
		t.Fatalf("kernels.DTypes = %v, want %v", kernels.DTypes, want)
	}
	for _, dt := range reduceop.DTypes {
		for _, op := range reduceop.Ops {
			_, err := kernels.ReduceKernelName(dt, op)
			devErr := device.CheckReduce(op, dt)
			if (err == nil) != (devErr == nil) {
				t.Errorf("ReduceKernelName(%v, %v) error %v, device.CheckReduce %v", dt, op, err, devErr)
			}
			if err != nil && !errors.Is(err, reduceop.ErrUnsupported) {
				t.Errorf("ReduceKernelName(%v, %v) error %v does not wrap ErrUnsupported", dt, op, err)
			}
		}
		_, err := kernels.ScaleKernelName(dt)
		if (err == nil) != (device.CheckReduce(reduceop.Avg, dt) == nil) {
			t.Errorf("ScaleKernelName(%v) error %v, device.CheckReduce(avg) disagrees", dt, err)
		}
	}
}
