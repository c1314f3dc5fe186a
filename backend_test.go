package goccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/reduceop"
)

// TestBackendResolve: GOCCL_BACKEND resolves as every setting does:
// WithBackend > the variable > the file's "backend" > auto.
func TestBackendResolve(t *testing.T) {
	file := func(v string) Option {
		return WithConfig(&Config{Goccl: GocclConfig{Backend: v}})
	}
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"default", nil, "auto"},
		{"file", []Option{file("goccl")}, "goccl"},
		{"env over file", []Option{file("auto"), fakeEnv(map[string]string{backend.EnvBackend: "goccl"})}, "goccl"},
		{"option over env", []Option{WithBackend("auto"), fakeEnv(map[string]string{backend.EnvBackend: "goccl"})}, "auto"},
		{"any case", []Option{WithBackend(" GOCCL ")}, "goccl"},
	} {
		o, err := buildOptions(tc.opts)
		if err != nil || o.backend != tc.want {
			t.Errorf("%s: backend %q, %v; want %q", tc.name, o.backend, err, tc.want)
		}
	}
}

// TestBackendRefused: an unknown name and, in a build without -tags cuda,
// nccl, and without -tags mpi, mpi are ErrInvalid at New, naming where
// the setting came from.
func TestBackendRefused(t *testing.T) {
	mpiBuilt, ncclBuilt := backend.Available(backend.MPI) == nil, backend.Available(backend.NCCL) == nil
	for _, tc := range []struct {
		name  string
		opt   Option
		words []string
	}{
		{"unknown", WithBackend("mpx"), []string{"WithBackend", `unknown backend "mpx"`}},
		{"nccl", fakeEnv(map[string]string{backend.EnvBackend: "nccl"}), []string{backend.EnvBackend, "built without -tags cuda"}},
		{"nccl in the file", WithConfig(&Config{Goccl: GocclConfig{Backend: "nccl"}}), []string{"WithConfig", "built without -tags cuda"}},
		{"mpi", WithBackend("mpi"), []string{"goccl built without -tags mpi"}},
	} {
		if tc.name == "mpi" && mpiBuilt || strings.HasPrefix(tc.name, "nccl") && ncclBuilt {
			continue
		}
		_, err := NewLocal(2, tc.opt)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
			continue
		}
		for _, w := range tc.words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
	if _, err := LoadConfig(writeConfig(t, `{"goccl": {"backend": "gloo"}}`)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "gloo") {
		t.Errorf("a file with backend gloo: %v", err)
	}
}

// TestBackendForGoccl: without a backend every call is goccl's own, and
// AlgorithmFor answers as before.
func TestBackendForGoccl(t *testing.T) {
	cs, err := NewLocal(2, WithBackend("goccl"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	if got := cs[0].BackendFor(algo.AllReduce, 1<<20); got != "goccl" {
		t.Errorf("BackendFor = %q, want goccl", got)
	}
	if got := cs[0].AlgorithmFor(algo.AllReduce, 1<<20); got == "mpi" || got == "" {
		t.Errorf("AlgorithmFor = %q", got)
	}
	for _, buf := range []any{nil, []float32{1, 2}, "not a buffer"} {
		if got := cs[0].BackendOn(algo.AllGather, buf, reduceop.Sum); got != "goccl" {
			t.Errorf("BackendOn(%T) = %q, want goccl", buf, got)
		}
	}
}
