//go:build !ibverbs

package ib_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/goccl/goccl/transport/ib"
)

func TestStubReturnsErrNotBuilt(t *testing.T) {
	if _, err := ib.Connect(context.Background(), ib.Config{Rank: 0, Size: 1}); !errors.Is(err, ib.ErrNotBuilt) {
		t.Errorf("Connect without a provider: %v, want ErrNotBuilt", err)
	}
	if err := ib.Probe(""); !errors.Is(err, ib.ErrNotBuilt) {
		t.Errorf("Probe: %v, want ErrNotBuilt", err)
	}
	if _, err := ib.Verbs().Open("", 0, 0); !errors.Is(err, ib.ErrNotBuilt) {
		t.Errorf("Verbs().Open: %v, want ErrNotBuilt", err)
	}
}

// exported lists the exported functions, methods and types declared in
// file, each as its printed signature.
func exported(t *testing.T, file string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
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
					continue
				}
				recv = b.String() + "."
			}
			var b strings.Builder
			printer.Fprint(&b, fset, d.Type)
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
							out = append(out, "value "+n.Name)
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestStubMatchesVerbs: stub.go (no tag) and verbs_cgo.go (tag ibverbs)
// declare the same exported API, so code that builds one way builds the
// other.
func TestStubMatchesVerbs(t *testing.T) {
	stub, verbs := exported(t, "stub.go"), exported(t, "verbs_cgo.go")
	if !slices.Equal(stub, verbs) {
		t.Fatalf("exported API differs:\n stub.go:      %v\n verbs_cgo.go: %v", stub, verbs)
	}
	if len(stub) == 0 {
		t.Fatal("no exported API found")
	}
}
