//go:build !cuda

package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/reduceop"
)

// deviceBuffer is goccl.DeviceBuffer, copied here because the root package
// may not build while this one is tested; the cuda-tagged test checks the
// real interface.
type deviceBuffer interface {
	DType() reduceop.DType
	Len() int
	CopyToHost(ctx context.Context, dst []byte, off int) error
	CopyFromHost(ctx context.Context, off int, src []byte) error
	Kernel() reduceop.Kernel
}

var (
	_ deviceBuffer    = (*cuda.Buffer)(nil)
	_ reduceop.Kernel = (*cuda.Kernel)(nil)
)

func TestStubReturnsErrNotBuilt(t *testing.T) {
	if _, err := cuda.Open(0); !errors.Is(err, cuda.ErrNotBuilt) {
		t.Errorf("Open(0) error = %v, want ErrNotBuilt", err)
	}
	if _, err := cuda.OpenLocal(); !errors.Is(err, cuda.ErrNotBuilt) {
		t.Errorf("OpenLocal() error = %v, want ErrNotBuilt", err)
	}
}

// exported returns "Recv.Name(params) results" for every exported function
// and method declared in the files of this directory that match keep, and
// the exported type names.
func exported(t *testing.T, keep func(*ast.File) bool) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if !keep(f) {
			continue
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				recv := ""
				if d.Recv != nil {
					var b strings.Builder
					printer.Fprint(&b, fset, d.Recv.List[0].Type)
					if !ast.IsExported(strings.TrimPrefix(b.String(), "*")) {
						continue // a method of an unexported type
					}
					recv = b.String() + "."
				}
				var b strings.Builder
				// Compare types only: parameter names may differ.
				ft := *d.Type
				ft.Params = typesOnly(ft.Params)
				ft.Results = typesOnly(ft.Results)
				printer.Fprint(&b, fset, &ft)
				out = append(out, recv+d.Name.Name+strings.TrimPrefix(b.String(), "func"))
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							out = append(out, "type "+s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								out = append(out, "var "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func typesOnly(fl *ast.FieldList) *ast.FieldList {
	if fl == nil {
		return nil
	}
	var out ast.FieldList
	for _, f := range fl.List {
		n := max(1, len(f.Names))
		for range n {
			out.List = append(out.List, &ast.Field{Type: f.Type})
		}
	}
	return &out
}

func buildTag(f *ast.File) string {
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if strings.HasPrefix(c.Text, "//go:build ") {
				return strings.TrimPrefix(c.Text, "//go:build ")
			}
		}
	}
	return ""
}

// TestStubMatchesCUDA checks that the stub declares exactly the exported API
// of the cuda-tagged files, which cannot be compiled on this machine.
func TestStubMatchesCUDA(t *testing.T) {
	stub := exported(t, func(f *ast.File) bool { return buildTag(f) == "!cuda" })
	real := exported(t, func(f *ast.File) bool { return buildTag(f) == "cuda" })
	if len(real) == 0 {
		t.Fatal("no cuda-tagged API found")
	}
	for _, s := range real {
		if !slices.Contains(stub, s) {
			t.Errorf("stub lacks %s", s)
		}
	}
	for _, s := range stub {
		if !slices.Contains(real, s) {
			t.Errorf("stub has %s, the cuda build does not", s)
		}
	}
}

func TestLocalDevice(t *testing.T) {
	for _, k := range []string{"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Cleanup(func() { os.Setenv(k, v) })
			os.Unsetenv(k)
		}
	}
	tests := []struct {
		env  map[string]string
		want int
	}{
		{nil, 0},
		{map[string]string{"LOCAL_RANK": "3"}, 3},
		{map[string]string{"LOCAL_RANK": "x", "SLURM_LOCALID": "2"}, 2},
		{map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "1", "SLURM_LOCALID": "2"}, 1},
		{map[string]string{"LOCAL_RANK": "-1"}, 0},
	}
	for _, tt := range tests {
		for k, v := range tt.env {
			t.Setenv(k, v)
		}
		if got := cuda.LocalDevice(); got != tt.want {
			t.Errorf("LocalDevice() with %v = %d, want %d", tt.env, got, tt.want)
		}
		for k := range tt.env {
			os.Unsetenv(k)
		}
	}
}

func ExampleOpen() {
	c, err := cuda.Open(cuda.LocalDevice())
	if errors.Is(err, cuda.ErrNotBuilt) {
		fmt.Println("no CUDA in this build; reducing on the host")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	// Output: no CUDA in this build; reducing on the host
}

// ExampleContext_Wrap compresses a framework's gradient in place with the
// 1-bit steps, on the framework's stream, without the host touching the
// data: ptr and stream would come from, say, a torch.Tensor's data_ptr()
// and torch.cuda.current_stream().cuda_stream.
func ExampleContext_Wrap() {
	var ptr, stream uintptr // from the framework
	const n = 1 << 20
	c, err := cuda.Open(cuda.LocalDevice())
	if errors.Is(err, cuda.ErrNotBuilt) {
		fmt.Println("no CUDA in this build")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	grad, err := c.Wrap(ptr, reduceop.Float32, n)
	if err != nil {
		fmt.Println(err) // names the pointer and range: not device memory of this device, or too short
		return
	}
	s, err := c.WrapStream(stream)
	if err != nil {
		fmt.Println(err)
		return
	}
	errBuf, _ := c.NewBuffer(reduceop.Float32, n) // error feedback, kept across steps
	bits, _ := c.NewBuffer(reduceop.Uint8, (n+7)/8)
	scale, _ := c.NewBuffer(reduceop.Float32, 1)
	k := c.Kernel()
	_ = k.CompensateNormOn(s, errBuf, grad, nil, scale) // errBuf += grad; scale = rms(errBuf)
	_ = k.PackUpdateOn(s, bits, errBuf, scale)          // bits = signs(errBuf); errBuf -= ±scale
	_ = k.DecompressOn(s, grad, bits, scale)            // grad = ±scale, what the other ranks will see
	// ... then exchange bits and scale, and AccumulateSignsOn each rank's.
	// Output: no CUDA in this build
}
