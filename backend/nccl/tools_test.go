//go:build cuda && cgo

package nccl_test

// What a user sees of NCCL's calls beside the calls themselves: the comms
// logger, the flight recorder and `goccl trace analyze`, and goccl bench's
// algo column. The checks that run the goccl command need GOCCL_BIN, a
// goccl built with -tags cuda (scripts/nccl-check.sh builds it).

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/flight"
	"github.com/goccl/goccl/reduceop"
)

const envBin = "GOCCL_BIN"

// runGoccl runs the goccl command with args, in env added to this process's.
func runGoccl(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv(envBin)
	if bin == "" {
		t.Skip("GOCCL_BIN is not set: run scripts/nccl-check.sh (a goccl built with -tags cuda)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestTrace: NCCL's calls in the comms log and the flight recorder (algo
// "nccl"), and a call the last rank never made, which `goccl trace
// analyze` names from the dumps.
func TestTrace(t *testing.T) {
	if os.Getenv(envBin) == "" {
		t.Skip("GOCCL_BIN is not set: run scripts/nccl-check.sh")
	}
	dir := t.TempDir()
	job(t, 3, "trace", time.Minute, func(int) []string {
		return []string{"GOCCL_TRACE_DIR=" + dir, "GOCCL_COMMS_LOG=1"}
	})
	out, err := runGoccl(t, nil, "trace", "analyze", dir)
	t.Logf("goccl trace analyze:\n%s", out)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("goccl trace analyze: %v, want exit status 1 (a problem found)", err)
	}
	for _, want := range []string{"rank 2 never entered", "all_reduce", "algo nccl"} {
		if !strings.Contains(out, want) {
			t.Errorf("goccl trace analyze does not say %q", want)
		}
	}
}

// TestBench: goccl bench's algo column says "nccl" for a device run that
// NCCL ran, under auto (the default) and nccl, and the algorithm where
// goccl's path ran it: GOCCL_BACKEND=goccl, or an op NCCL lacks.
func TestBench(t *testing.T) {
	for _, tc := range []struct {
		backend string
		args    []string
		nccl    bool
	}{
		{"", []string{"-op", "allreduce"}, true},
		{"nccl", []string{"-op", "alltoall"}, true},
		{"auto", []string{"-op", "reducescatter", "-dtype", "bfloat16"}, true},
		{"goccl", []string{"-op", "allreduce"}, false},
		{"nccl", []string{"-op", "allreduce", "-dtype", "int32", "-redop", "bxor"}, false},
	} {
		args := append([]string{"bench", "-transport", "mem", "-n", "2", "-device", "cuda", "-b", "4K", "-e", "4K",
			"-w", "1", "-iters", "2", "-check", "-format", "csv", "-q"}, tc.args...)
		out, err := runGoccl(t, []string{"GOCCL_BACKEND=" + tc.backend}, args...)
		if err != nil {
			t.Errorf("GOCCL_BACKEND=%s goccl %v: %v\n%s", tc.backend, args, err, out)
			continue
		}
		algo, wrong := benchRow(out)
		if got := algo == "nccl"; got != tc.nccl || wrong != "0" {
			t.Errorf("GOCCL_BACKEND=%s goccl %v: algo %q and %s wrong, want nccl=%v and 0 wrong\n%s", tc.backend, args, algo, wrong, tc.nccl, out)
		}
	}
}

// benchRow is the algo and #wrong cells of a goccl bench csv's first row.
func benchRow(out string) (algo, wrong string) {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	rows, err := csv.NewReader(strings.NewReader(strings.Join(lines, "\n"))).ReadAll()
	if err != nil || len(rows) < 2 {
		return "", "?"
	}
	for i, h := range rows[0] {
		switch {
		case h == "algo":
			algo = rows[1][i]
		case strings.HasPrefix(h, "wrong") || h == "#wrong":
			wrong = rows[1][i]
		}
	}
	return algo, wrong
}

// --- the ranks ---

// trace: four calls (three on NCCL, one on host memory, goccl's), which
// the comms log and the flight record must show with the library that
// ran them; then the last rank leaves out the fifth call, and the others
// time out in it: their dumps (GOCCL_TRACE_DIR) and the last rank's,
// written on demand, are what `goccl trace analyze` reads.
func (r *rank) trace() bool {
	c, me, n := r.c, r.c.Rank(), r.c.Size()
	const m = 256
	d := r.buf(reduceop.Float32, seq(m, func(i int) float64 { return val(me, i) }))
	all := r.buf(reduceop.Float32, make([]float64, n*m))
	defer d.Free()
	defer all.Free()
	h := make([]float32, m)
	for _, err := range []error{c.AllReduce(r.ctx, d, reduceop.Sum), c.AllReduce(r.ctx, d, reduceop.Max),
		c.AllReduce(r.ctx, h, reduceop.Sum), c.AllGather(r.ctx, d, all)} {
		if err != nil {
			r.failf("call: %v", err)
			return false
		}
	}
	want := []struct{ op, algo string }{{"all_reduce", "nccl"}, {"all_reduce", "nccl"}, {"all_reduce", ""}, {"all_gather_into_tensor", "nccl"}}
	recs := c.CommsLog().Records()
	if len(recs) != len(want) {
		r.failf("the comms log has %d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i := range min(len(recs), len(want)) {
		if recs[i].Op != want[i].op || (recs[i].Algo == "nccl") != (want[i].algo == "nccl") {
			r.failf("comms log record %d: %s by %q, want %s by %s", i, recs[i].Op, recs[i].Algo, want[i].op, cmp.Or(want[i].algo, "goccl's own algorithm"))
		}
	}
	var dump bytes.Buffer
	if err := c.DumpTrace(&dump); err != nil {
		r.failf("DumpTrace: %v", err)
		return false
	}
	_, es, err := flight.Read(&dump)
	if err != nil || len(es) < len(want) {
		r.failf("the flight record: %d entries, %v", len(es), err)
		return false
	}
	for i, e := range es[len(es)-len(want):] {
		if e.Op != want[i].op || (e.Algo == "nccl") != (want[i].algo == "nccl") || e.State != "done" {
			r.failf("flight record entry %d: %s by %q, %s; want %s by %s, done", i, e.Op, e.Algo, e.State, want[i].op, cmp.Or(want[i].algo, "goccl's own algorithm"))
		}
	}
	if me == n-1 {
		f, err := os.Create(filepath.Join(os.Getenv("GOCCL_TRACE_DIR"), fmt.Sprintf("rank-%d.jsonl", me)))
		if err == nil {
			err = errors.Join(c.DumpTrace(f), f.Close())
		}
		if err != nil {
			r.failf("dump: %v", err)
		}
		time.Sleep(4 * time.Second) // alive, and behind, while the others time out
		return r.bad == 0
	}
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	err = c.AllReduce(ctx, d, reduceop.Sum)
	var ge *goccl.Error
	if !errors.Is(err, goccl.ErrTimeout) || !errors.As(err, &ge) || ge.Peer != n-1 {
		r.failf("the call rank %d left out: %v, want ErrTimeout naming it", n-1, err)
	}
	return r.bad == 0
}
