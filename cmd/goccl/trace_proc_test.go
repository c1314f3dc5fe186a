package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/flight"
	"github.com/goccl/goccl/reduceop"
)

// The analyzer on the dumps of real jobs: four ranks, each its own process
// over TCP with GOCCL_TRACE_DIR set, make ten allreduces whose counts
// differ (as a model's gradient buckets do), and rank 1 goes wrong at the
// fifth in one of the four ways a job hangs or breaks. Every rank that can
// writes its dump when its communicator aborts; then `goccl trace analyze`
// must exit 1 and its verdict must name rank 1 and the call's sequence
// number. (Init may make world calls of its own, so the fifth call is
// #base+5, base being the calls a rank's recorder holds after Init.)
func TestTraceAnalyzeHangsAcrossProcesses(t *testing.T) {
	if os.Getenv(hangChildEnv) != "" {
		os.Exit(hangChild())
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	const n = 4
	// In want, #SEQ stands for the sequence number of the call rank 1 gets
	// wrong, #PREV for the one before.
	cases := []struct {
		kind string
		want []string // in the verdict (the lines starting "problem:")
	}{
		// Rank 1's fifth call is the others' sixth (count 14, not 13):
		// the mismatch is named at once.
		{"skip", []string{"world #SEQ: calls differ: ranks 0, 2, 3 called all_reduce(dtype=float32, count=13, op=sum), rank 1 called all_reduce(dtype=float32, count=14, op=sum)"}},
		{"other", []string{"world #SEQ: calls differ: ranks 0, 2, 3 called all_reduce(dtype=float32, count=13, op=sum), rank 1 called broadcast(dtype=float32, count=13, root=0)"}},
		// Rank 1 sleeps before its fifth call until the others' timeout
		// aborts it.
		{"stall", []string{"world #SEQ all_reduce(dtype=float32, count=13, op=sum): rank 1 never entered it (its last call was #PREV all_reduce)",
			"everyone waits on rank 1: it never entered world #SEQ"}},
		// Rank 1 is SIGKILLed before its fifth call: it leaves no dump, so
		// the survivors' dumps must name it.
		{"die", []string{"world #SEQ all_reduce(dtype=float32, count=13, op=sum): ", "rank 1 left no dump (dead?)",
			"on rank 1: no dump from rank 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			dir := t.TempDir()
			outs, base := runHangJob(t, n, tc.kind, dir)
			var out, errOut bytes.Buffer
			code := traceMain([]string{"analyze", dir}, &out, &errOut)
			report := out.String()
			t.Logf("goccl trace analyze:\n%s", report)
			if code != 1 {
				t.Fatalf("exit %d, want 1 (a problem):\n%s%s\nranks:\n%s", code, report, errOut.String(), outs)
			}
			var verdict strings.Builder
			for line := range strings.Lines(report) {
				if strings.HasPrefix(line, "problem: ") {
					verdict.WriteString(line)
				}
			}
			for _, w := range tc.want {
				w = strings.NewReplacer("#SEQ", fmt.Sprintf("#%d", base+hangAt), "#PREV", fmt.Sprintf("#%d", base+hangAt-1)).Replace(w)
				if !strings.Contains(verdict.String(), w) {
					t.Errorf("the verdict does not say %q:\n%s\nranks:\n%s", w, report, outs)
				}
			}
			// No other rank is blamed, and the mismatches (where ranks
			// wait on each other's different calls) show no cycle of waits.
			for _, bad := range []string{"rank 0 ", "rank 2 ", "rank 3 ", "waits go round"} {
				if strings.Contains(verdict.String(), "waits on "+bad) || strings.Contains(verdict.String(), "wait on "+bad) ||
					(bad == "waits go round" && strings.Contains(verdict.String(), bad)) {
					t.Errorf("the verdict blames the wrong rank (%q):\n%s", bad, report)
				}
			}
		})
	}
}

const (
	hangChildEnv = "GOCCL_TEST_HANG_CHILD" // the kind of hang rank 1 makes
	hangCulprit  = 1
	hangAt       = 5 // the call rank 1 gets wrong
	hangCalls    = 10
	hangTimeout  = 2 * time.Second
)

// runHangJob runs n ranks of this test binary, each playing hangChild, and
// returns their output and the calls rank 0's recorder held after Init.
func runHangJob(t *testing.T, n int, kind, dir string) (string, int) {
	t.Helper()
	port := freeTCPPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	outs := make([]testutil.Buffer, n)
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^TestTraceAnalyzeHangsAcrossProcesses$", "-test.count=1")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "OMPI_") && !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "PMI") &&
				!strings.HasPrefix(kv, "GOCCL_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, hangChildEnv+"="+kind, "GOCCL_TRACE_DIR="+dir, "GOCCL_TRANSPORT=tcp",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatalf("start rank %d: %v", r, err)
		}
		cmds[r] = cmd
	}
	var all strings.Builder
	for r, cmd := range cmds {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case r == hangCulprit && kind == "die" && errors.As(err, &ee) && !ee.Exited():
		case err != nil:
			t.Errorf("rank %d: %v", r, err)
		}
		fmt.Fprintf(&all, "--- rank %d:\n%s", r, outs[r].String())
	}
	if ctx.Err() != nil {
		t.Fatalf("the job did not end within a minute (a hang):\n%s", all.String())
	}
	base := -1
	for line := range strings.Lines(outs[0].String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "BASE "); ok {
			base, _ = strconv.Atoi(v)
		}
	}
	if base < 0 {
		t.Errorf("rank 0 did not say how many calls Init made")
	}
	if t.Failed() {
		t.FailNow()
	}
	return all.String(), base
}

// freeTCPPort returns a loopback TCP port that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hangChild is one rank. Rank 1 gets its fifth call wrong in the way its
// kind says; every rank's first failed call ends its loop (the
// communicator is aborted and has dumped), and it exits 0 having printed
// the error, or 1 if no call failed or the dump is not there.
//
// Rank 1 acts only once every other rank has entered the fifth call (each
// starts it async and then writes a file saying so): otherwise the abort
// could reach a rank still finishing the fourth, or not yet in the fifth,
// and its dump would rightly show it there, not where the test looks.
func hangChild() int {
	kind := os.Getenv(hangChildEnv)
	ctx := context.Background()
	c, err := goccl.Init(ctx, goccl.WithTimeout(hangTimeout))
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	defer c.Close()
	var rec bytes.Buffer
	if err := c.DumpTrace(&rec); err != nil {
		fmt.Println("dump:", err)
		return 1
	}
	_, es, err := flight.Read(&rec)
	if err != nil {
		fmt.Println("dump:", err)
		return 1
	}
	fmt.Printf("BASE %d\n", len(es)) // Init's own calls
	me := c.Rank()
	dump := filepath.Join(os.Getenv("GOCCL_TRACE_DIR"), fmt.Sprintf("rank-%d.jsonl", me))

	dir := os.Getenv("GOCCL_TRACE_DIR")
	for i := 1; i <= hangCalls; i++ {
		if me != hangCulprit && i == hangAt {
			w := c.AllReduceAsync(ctx, make([]float32, 8+i), reduceop.Sum)
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("entered-%d", me)), nil, 0o600)
			if err := w.Wait(ctx); err != nil {
				fmt.Printf("call %d: %v\n", i, err)
				return dumped(dump)
			}
			continue
		}
		if me == hangCulprit && i == hangAt {
			for r := range c.Size() {
				for deadline := time.Now().Add(30 * time.Second); r != me; time.Sleep(5 * time.Millisecond) {
					if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("entered-%d", r))); err == nil || time.Now().After(deadline) {
						break
					}
				}
			}
			switch kind {
			case "skip":
				continue
			case "stall":
				// Until the others' timeout has aborted this rank too and
				// its dump is being written; it makes no more calls (one
				// made now could still get into the dump). Close waits
				// for the abort, dump included, to finish.
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					if _, err := os.Stat(dump); err == nil || time.Now().After(deadline) {
						break
					}
				}
				fmt.Println("stalled until the abort")
				return dumped(dump)
			case "die":
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			case "other":
				if err := c.Broadcast(ctx, make([]float32, 8+i), 0); err != nil {
					fmt.Printf("call %d: %v\n", i, err)
					return dumped(dump)
				}
				continue
			}
		}
		if err := c.AllReduce(ctx, make([]float32, 8+i), reduceop.Sum); err != nil {
			fmt.Printf("call %d: %v\n", i, err)
			return dumped(dump)
		}
	}
	fmt.Println("no call failed")
	return 1
}

// dumped is 0 when this rank's dump was written, 1 if not.
func dumped(path string) int {
	if _, err := os.Stat(path); err != nil {
		fmt.Println("no dump:", err)
		return 1
	}
	return 0
}
