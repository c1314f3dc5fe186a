package goccl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// TestKillRankTCP kills one rank with SIGKILL in the middle of a loop of
// collectives between real processes over TCP. Every survivor must return,
// well within the timeout, an error that names the collective and the lost
// rank and wraps ErrPeerClosed and ErrAborted; the communicator is then aborted, so the
// next call fails at once with ErrAborted; and after Close no goroutine or
// socket is left behind.
func TestKillRankTCP(t *testing.T) {
	if os.Getenv(faultChildEnv) != "" {
		faultChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	t.Setenv("GOCCL_TRANSPORT", "tcp") // same-host ranks would take shm (TestKillRankShm)
	const n, victim = 4, 2
	for _, op := range []string{"allreduce", "broadcast", "alltoall", "barrier"} {
		t.Run(op, func(t *testing.T) {
			outs := runFaultJob(t, "TestKillRankTCP", n, op, victim)
			for r, out := range outs {
				if r == victim {
					continue
				}
				f := parseFault(out)
				switch {
				case f == nil:
					t.Errorf("rank %d reported no fault:\n%s", r, out)
				case f["peer"] != strconv.Itoa(victim):
					t.Errorf("rank %d: error names peer %s, want the lost rank %d:\n%s", r, f["peer"], victim, out)
				case f["peerclosed"] != "true" || f["op"] != opNames[op]:
					t.Errorf("rank %d: want ErrPeerClosed in %s:\n%s", r, opNames[op], out)
				case f["wrapsaborted"] != "true":
					t.Errorf("rank %d: the failed call's error does not wrap ErrAborted:\n%s", r, out)
				case f["aborted"] != "true":
					t.Errorf("rank %d: the next call did not fail fast with ErrAborted:\n%s", r, out)
				case atoi(f["ms"]) > faultTimeout.Milliseconds()+2000:
					t.Errorf("rank %d: took %s ms, more than the timeout + 2 s", r, f["ms"])
				case atoi(f["goroutines"]) > 0 || atoi(f["fds"]) > 0:
					t.Errorf("rank %d: leaked %s goroutines and %s file descriptors after Close:\n%s", r, f["goroutines"], f["fds"], out)
				}
			}
		})
	}
}

const faultChildEnv = "GOCCL_TEST_FAULT_CHILD"

// TestKillRankLazy is TestKillRankTCP with links on demand and a ring
// allreduce on 6 ranks: rank 5 never links to the victim, rank 2 (Init
// links r±1 and r±2, the partners of its address exchange), and must
// still hear of its death, through the abort notices its own links relay,
// and name it.
func TestKillRankLazy(t *testing.T) {
	if os.Getenv(faultChildEnv) != "" {
		faultChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	t.Setenv("GOCCL_TRANSPORT", "tcp")
	t.Setenv("GOCCL_CONNECT", "lazy")
	t.Setenv("GOCCL_ALGO", "ring")
	const n, victim = 6, 2
	unlinked := map[int]bool{5: true}
	outs := runFaultJob(t, "TestKillRankLazy", n, "allreduce", victim)
	for r, out := range outs {
		if r == victim {
			continue
		}
		f := parseFault(out)
		switch {
		case f == nil:
			t.Errorf("rank %d reported no fault:\n%s", r, out)
		case unlinked[r] && f["linkedvictim"] != "false":
			t.Errorf("rank %d held a link to the victim: the test does not test what it means to:\n%s", r, out)
		case f["peer"] != strconv.Itoa(victim):
			t.Errorf("rank %d: error names peer %s, want the lost rank %d:\n%s", r, f["peer"], victim, out)
		case f["peerclosed"] != "true" || f["wrapsaborted"] != "true":
			t.Errorf("rank %d: want ErrPeerClosed and ErrAborted:\n%s", r, out)
		case f["aborted"] != "true":
			t.Errorf("rank %d: the next call did not fail fast with ErrAborted:\n%s", r, out)
		case atoi(f["ms"]) > faultTimeout.Milliseconds()+2000:
			t.Errorf("rank %d: took %s ms, more than the timeout + 2 s", r, f["ms"])
		case atoi(f["goroutines"]) > 0 || atoi(f["fds"]) > 0:
			t.Errorf("rank %d: leaked %s goroutines and %s file descriptors after Close:\n%s", r, f["goroutines"], f["fds"], out)
		}
		t.Logf("rank %d: %s", r, strings.SplitN(out, "\n", 3)[:2])
	}
}

// faultTimeout is the communicators' timeout: a survivor must not need it,
// the lost link alone must end its call.
const faultTimeout = 20 * time.Second

var opNames = map[string]string{"allreduce": "all_reduce", "broadcast": "broadcast", "alltoall": "all_to_all_single", "barrier": "barrier"}

func atoi(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }

// parseFault reads the child's "FAULT k=v ..." line.
func parseFault(out string) map[string]string {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "FAULT "); ok {
			f := map[string]string{}
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			return f
		}
	}
	return nil
}

// runFaultJob starts n ranks of this test binary and returns their output.
func runFaultJob(t *testing.T, test string, n int, op string, victim int) []string {
	t.Helper()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	outs := make([]string, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "OMPI_") && !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "PMI") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, faultChildEnv+"=1", "GOCCL_TEST_FAULT_OP="+op,
			"GOCCL_TEST_FAULT_VICTIM="+strconv.Itoa(victim), "RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _ := cmd.CombinedOutput()
			outs[r] = string(out)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the job did not end within 60 s (a hang):\n%s", strings.Join(outs, "\n---\n"))
	}
	return outs
}

// goroutinesLeft waits, up to 5 s, until no more goroutines run than the
// g0 counted before Init, and returns how many more there are then and,
// if any, every goroutine's stack.
//
// The wait is for goroutines that are exiting: Close returns before the
// goroutine that newComm starts when a link is lost (OnPeerLoss, comm.go)
// has finished; it can still be in awaitNotice or markAborted, or in
// goexit, and is gone milliseconds later. Nothing is tolerated after the
// wait: runtime.NumGoroutine counts no runtime goroutine, and goccl starts
// none that should outlive its communicator (it uses no os/signal, and
// the transport's readers and writers end with the endpoint).
func goroutinesLeft(g0 int) (int, string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		g := runtime.NumGoroutine() - g0
		if g <= 0 {
			return 0, ""
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			return g, "goroutines after Close:\n" + b.String()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func openFDs() int {
	es, _ := os.ReadDir("/proc/self/fd")
	return len(es)
}

// faultChild is one rank: it loops over the collective until it fails (or,
// as the victim, kills itself in the middle), then reports.
func faultChild(t *testing.T) {
	op := os.Getenv("GOCCL_TEST_FAULT_OP")
	victim, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_FAULT_VICTIM"))
	ctx := context.Background()
	// Start the runtime's network poller (its descriptors stay for the
	// process's life) before counting what Init opens.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	fds0, g0 := openFDs(), runtime.NumGoroutine()
	c, err := goccl.Init(ctx, goccl.WithTimeout(faultTimeout))
	if err != nil {
		t.Fatal(err)
	}
	n := c.Size()
	buf := make([]float32, 4096*n)
	out := make([]float32, 4096*n)
	run := func() error {
		switch op {
		case "allreduce":
			return c.AllReduce(ctx, buf, reduceop.Sum)
		case "broadcast":
			return c.Broadcast(ctx, buf, 0)
		case "alltoall":
			return c.AllToAll(ctx, buf, out)
		}
		return c.Barrier(ctx)
	}
	for i := 0; i < 100000; i++ {
		if c.Rank() == victim && i == 50 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		start := time.Now()
		err := run()
		if err == nil {
			continue
		}
		ms := time.Since(start).Milliseconds()
		var ge *goccl.Error
		peer, opName := -1, ""
		if errors.As(err, &ge) {
			peer, opName = ge.Peer, ge.Op
		}
		// Whether this rank ever held a link to the victim: links are
		// never dropped before Close, and no call dials after the abort.
		linked := goccl.LinkedTo(c, victim)
		t1 := time.Now()
		err2 := run()
		fast := errors.Is(err2, goccl.ErrAborted) && time.Since(t1) < 100*time.Millisecond
		c.Close()
		g, stacks := goroutinesLeft(g0)
		fmt.Printf("FAULT op=%s peer=%d linkedvictim=%v peerclosed=%v wrapsaborted=%v aborted=%v ms=%d goroutines=%d fds=%d\nerror: %v\n%s",
			opName, peer, linked, errors.Is(err, goccl.ErrPeerClosed), errors.Is(err, goccl.ErrAborted), fast, ms, g, openFDs()-fds0, err, stacks)
		return
	}
	c.Close()
	t.Fatalf("rank %d: no fault in 100000 calls", c.Rank())
}
