//go:build cuda && cgo

package nccl_test

// Auto's choice, as GOCCL_DEBUG=info says it, and NewLocal's ranks under
// auto.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend/nccl"
	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/reduceop"
)

// backendLines is the GOCCL_DEBUG=info lines of a rank's output that say
// which backend it runs.
func backendLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `msg="goccl backend"`) {
			lines = append(lines, l)
		}
	}
	return lines
}

// saysBackend fails t unless each rank's output (at GOCCL_DEBUG=info)
// has one line saying which backend it runs, and that line says want.
func saysBackend(t *testing.T, outs []string, want string) {
	t.Helper()
	for r, out := range outs {
		if l := backendLines(out); len(l) != 1 || !strings.Contains(l[0], want) {
			t.Errorf("rank %d: %q, want one line saying %q", r, l, want)
		}
	}
}

// TestLocal: NewLocal's ranks, goroutines of one process, under auto:
// NewLocal returns (the ranks agree without asking each other, which it
// makes one after another), and their device calls run on NCCL; without
// the library, on goccl's own path.
func TestLocal(t *testing.T) {
	job(t, 1, "local", 30*time.Second, func(int) []string { return []string{"GOCCL_DEBUG=info"} })
	job(t, 1, "local-fallback", 30*time.Second, func(int) []string { return []string{nccl.EnvLib + "=/nonexistent/libnccl.so.2"} })
}

// processChecks run in a process of their own instead of one rank of a
// job: they make their own communicators.
var processChecks = map[string]func() bool{
	"local":          func() bool { return localJob(true) },
	"local-fallback": func() bool { return localJob(false) },
}

// localJob makes NewLocal's two ranks under auto (within a bound: it hung
// when auto's agreement asked a rank not made yet) and allreduces a
// device buffer on each: on NCCL if onNCCL, else on goccl's own path.
func localJob(onNCCL bool) bool {
	const n = 2
	made := make(chan error, 1)
	var cs []*goccl.Comm
	go func() {
		var err error
		cs, err = goccl.NewLocal(n, goccl.WithTimeout(20*time.Second))
		made <- err
	}()
	select {
	case err := <-made:
		if err != nil {
			fmt.Println("NewLocal:", err)
			return false
		}
	case <-time.After(15 * time.Second):
		fmt.Println("NewLocal under auto did not return within 15 s")
		return false
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	dev, err := cuda.Open(0)
	if err != nil {
		fmt.Println("cuda:", err)
		return false
	}
	want := map[bool]string{true: "nccl", false: "goccl"}[onNCCL]
	before := nccl.Issued()
	ranks := make([]*rank, n)
	var wg sync.WaitGroup
	for i, c := range cs {
		ranks[i] = &rank{c: c, dev: dev, ctx: context.Background()}
		wg.Add(1)
		go func(r *rank) {
			defer wg.Done()
			b := r.buf(reduceop.Float32, seq(64, func(i int) float64 { return val(c.Rank(), i) }))
			defer b.Free()
			if got := c.BackendOn(algo.AllReduce, b, reduceop.Sum); got != want {
				r.failf("BackendOn says %q, want %q", got, want)
			}
			if err := c.AllReduce(r.ctx, b, reduceop.Sum); err != nil {
				r.failf("allreduce: %v", err)
				return
			}
			r.check("allreduce", reduceop.Float32, r.read(b), seq(64, func(i int) float64 { return reference(reduceop.Float32, reduceop.Sum, n, i) }))
		}(ranks[i])
	}
	wg.Wait()
	bad := 0
	for _, r := range ranks {
		bad += r.bad
	}
	if got, want := nccl.Issued()-before, map[bool]uint64{true: n}[onNCCL]; got != want {
		fmt.Printf("%d calls ran on NCCL, want %d\n", got, want)
		bad++
	}
	return bad == 0
}
