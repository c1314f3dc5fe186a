package goccl_test

import (
	"bytes"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// The import rules of docs/ARCHITECTURE.md, stated as data and checked
// against `go list`, in the manner of Go's own go/build/deps_test.go: a
// package of ours may import only the packages of ours its rule allows,
// and a package no rule names fails the test, so that a new package
// states its place in the layers when it is made.
//
// A rule's pattern is a path below the module ("algo", "transport/*" for
// the packages under transport, "" for the root); the most specific
// pattern that matches wins. allow lists patterns too; "*" allows every
// package of ours (the commands, the examples and the root itself).
var importRules = []struct {
	pkg   string
	allow []string
}{
	// The root: everything below it, nothing above it.
	{"", []string{"algo", "algo/*", "backend", "backend/*", "commslog", "device", "internal/*", "reduceop", "store", "transport", "transport/*"}},

	// Leaves: nothing of ours.
	{"reduceop", nil},
	{"commslog", nil},
	{"internal/clock", nil},
	{"internal/cpu", nil},
	{"internal/flight", []string{"internal/clock", "reduceop"}},
	{"internal/launch", nil},
	{"internal/quiet", nil},
	{"internal/refuse", nil},
	{"internal/scratch", nil},
	{"internal/testutil", nil},
	{"internal/notice", []string{"internal/wire", "transport"}},
	{"internal/slab", nil},
	{"internal/settings", nil},

	// The internal machines the root adapts: no root, and only what
	// their own job needs.
	{"internal/elems", []string{"reduceop"}},
	{"internal/wire", []string{"commslog", "reduceop", "transport"}},
	{"internal/board", []string{"internal/clock", "internal/cpu", "internal/wire", "reduceop", "transport"}},
	{"internal/devpath", []string{"algo", "device", "internal/scratch", "internal/wire", "reduceop", "transport"}},
	{"internal/rendezvous", []string{"internal/*", "store", "transport", "transport/*"}},

	// Backends: the seam (no root), and the libraries behind it.
	{"backend", []string{"device", "internal/wire", "reduceop", "transport"}},
	{"backend/*", []string{"backend", "device", "internal/wire", "reduceop"}},

	// Algorithms never see a transport.
	{"algo", []string{"internal/scratch"}},
	{"algo/*", []string{"algo"}},
	{"algo/twolevel", []string{"algo", "algo/halving", "algo/ring", "algo/tree"}}, // runs the one-level families on sub-groups
	{"sim", []string{"algo", "algo/*"}},

	// Transports never see an algorithm or the root.
	{"transport", []string{"internal/scratch"}},
	{"transport/*", []string{"internal/quiet", "internal/refuse", "internal/scratch", "transport", "transport/ib"}},

	{"store", []string{"internal/refuse"}},
	{"device", []string{"reduceop"}},
	{"device/*", []string{"device", "kernels", "onebit", "reduceop"}},
	{"kernels", []string{"reduceop"}},
	{"onebit", []string{"", "device", "reduceop"}},
	{"ckpt", []string{"", "reduceop"}},

	// Programs: anything.
	{"cmd/*", []string{"*"}},
	{"examples/*", []string{"*"}},
}

const module = "github.com/goccl/goccl"

// ruleFor returns the allow list of the most specific rule matching pkg
// (a path below the module), and whether one does.
func ruleFor(pkg string) ([]string, bool) {
	best, found := -1, false
	var allow []string
	for _, r := range importRules {
		if matchPkg(r.pkg, pkg) && len(r.pkg) > best {
			best, allow, found = len(r.pkg), r.allow, true
		}
	}
	return allow, found
}

// matchPkg reports whether pattern matches pkg: equal, or "dir/*" for
// any package below dir.
func matchPkg(pattern, pkg string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/*"); ok {
		return strings.HasPrefix(pkg, dir+"/")
	}
	return pattern == pkg
}

func TestImportRules(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	// With the build tags too, so that cgo-backed packages are checked.
	for _, tags := range []string{"", "cuda,ibverbs,mpi"} {
		out, err := exec.Command("go", "list", "-e", "-tags", tags,
			"-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		for line := range bytes.Lines(out) {
			fields := strings.Fields(string(line))
			if len(fields) == 0 {
				continue
			}
			pkg := ours(fields[0])
			for _, imp := range fields[1:] {
				if imp == "gorgonia.org/cu" && pkg != "device/cuda" && !matchPkg("examples/*", pkg) {
					t.Errorf("%s imports gorgonia.org/cu: only device/cuda (and an example playing a framework that owns its GPU memory) may: its init exits the process without a GPU", fields[0])
				}
			}
			allow, ok := ruleFor(pkg)
			if !ok {
				t.Errorf("package %s has no import rule: add one to importRules and to docs/ARCHITECTURE.md", fields[0])
				continue
			}
			for _, imp := range fields[1:] {
				if imp != module && !strings.HasPrefix(imp, module+"/") {
					continue
				}
				dep := ours(imp)
				if !slices.ContainsFunc(allow, func(a string) bool { return a == "*" || matchPkg(a, dep) }) {
					t.Errorf("%s imports %s, which its rule does not allow (tags %q)", show(pkg), show(dep), tags)
				}
			}
		}
	}
}

// ours returns an import path of ours below the module ("" for the root).
func ours(imp string) string {
	return strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
}

func show(pkg string) string { return path.Join(module, pkg) }

// The rules themselves: what ARCHITECTURE.md promises holds of them.
func TestImportRulesSay(t *testing.T) {
	for _, pkg := range []string{"internal/wire", "internal/board", "internal/devpath", "internal/rendezvous", "internal/clock", "internal/elems"} {
		if allow, _ := ruleFor(pkg); slices.Contains(allow, "") || slices.Contains(allow, "*") {
			t.Errorf("%s may import the root", pkg)
		}
	}
	for _, pkg := range []string{"algo", "algo/ring", "sim"} {
		allow, _ := ruleFor(pkg)
		for _, a := range allow {
			if matchPkg(a, "transport") || matchPkg(a, "transport/tcp") || a == "" {
				t.Errorf("%s may import %q", pkg, a)
			}
		}
	}
	for _, pkg := range []string{"transport", "transport/tcp", "transport/shm"} {
		allow, _ := ruleFor(pkg)
		for _, a := range allow {
			if matchPkg(a, "algo") || matchPkg(a, "algo/ring") || a == "" {
				t.Errorf("%s may import %q", pkg, a)
			}
		}
	}
	if allow, _ := ruleFor("reduceop"); len(allow) != 0 {
		t.Errorf("reduceop may import %v", allow)
	}
}
