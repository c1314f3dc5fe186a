package goccl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// TestStallBound: four processes under `goccl run -n 4` loop over one
// collective; once every rank is in the loop, rank stallVictim is frozen
// from outside with SIGSTOP, so its sockets and shared memory stay open
// and it never runs again. Every survivor's failing call must return
// within the timeout + grace (README, Errors; grace is WithTimeout's
// timeout/10 clamped to [100ms, 1s]) + stallSlack, with a *goccl.Error
// that names the stopped rank or says the communicator aborted. It runs
// each op (allreduce, broadcast, all-to-all, barrier, send/recv) over
// each transport (shm, tcp) once with a 1 s timeout; scripts/stall.sh
// runs it more often with the timeout of the issue (5 s):
//
//	GOCCL_STALL_REPS     repetitions of each op and transport (1)
//	GOCCL_STALL_TIMEOUT  the communicators' timeout (1s)
//	GOCCL_STALL_OPS      comma-separated ops (all)
//	GOCCL_STALL_TRANSPORTS  comma-separated transports (shm,tcp)
//
// It prints one line per survivor and a summary per op and transport
// (the largest elapsed time against the bound) to stdout.
func TestStallBound(t *testing.T) {
	if os.Getenv(stallOpEnv) != "" {
		os.Exit(stallWorker())
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	reps := 1
	if s := os.Getenv("GOCCL_STALL_REPS"); s != "" {
		var err error
		if reps, err = strconv.Atoi(s); err != nil || reps < 1 {
			t.Fatalf("GOCCL_STALL_REPS=%q", s)
		}
	}
	timeout := time.Second
	if s := os.Getenv("GOCCL_STALL_TIMEOUT"); s != "" {
		var err error
		if timeout, err = time.ParseDuration(s); err != nil {
			t.Fatalf("GOCCL_STALL_TIMEOUT=%q: %v", s, err)
		}
	}
	ops := listEnv("GOCCL_STALL_OPS", "allreduce,broadcast,alltoall,barrier,sendrecv")
	transports := listEnv("GOCCL_STALL_TRANSPORTS", "shm,tcp")
	grace := min(max(timeout/10, 100*time.Millisecond), time.Second)
	bound := timeout + grace + stallSlack
	bin := buildBinaries(t, "./cmd/goccl")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ op, transport string }
	worst := map[key]time.Duration{}
	violations := 0
	for rep := range reps {
		for _, tr := range transports {
			for _, op := range ops {
				lines, err := runStallJob(t, filepath.Join(bin, "goccl"), exe, op, tr, timeout)
				if err != nil {
					violations++
					fmt.Printf("STALL-VIOLATION rep=%d op=%s transport=%s: %v\n", rep, op, tr, err)
					t.Errorf("rep %d, %s over %s: %v", rep, op, tr, err)
					continue
				}
				for _, l := range lines {
					fmt.Printf("STALL rep=%d op=%s transport=%s rank=%d elapsed=%v error=%q\n",
						rep, op, tr, l.rank, l.elapsed.Round(time.Millisecond), l.err)
					k := key{op, tr}
					worst[k] = max(worst[k], l.elapsed)
					var bad []string
					if l.elapsed > bound {
						bad = append(bad, fmt.Sprintf("took %v, more than the bound %v (timeout %v + grace %v + slack %v)", l.elapsed, bound, timeout, grace, stallSlack))
					}
					if !l.gocclErr {
						bad = append(bad, "the error is no *goccl.Error")
					} else if l.peer != stallVictim && !l.aborted {
						bad = append(bad, fmt.Sprintf("the error names peer %d, not the stopped rank %d, and does not say aborted", l.peer, stallVictim))
					}
					if len(bad) > 0 {
						violations++
						fmt.Printf("STALL-VIOLATION rep=%d op=%s transport=%s rank=%d: %s\n", rep, op, tr, l.rank, strings.Join(bad, "; "))
						t.Errorf("rep %d, %s over %s, rank %d: %s: %s", rep, op, tr, l.rank, strings.Join(bad, "; "), l.err)
					}
				}
			}
		}
	}
	var keys []key
	for k := range worst {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].transport != keys[j].transport {
			return keys[i].transport < keys[j].transport
		}
		return keys[i].op < keys[j].op
	})
	fmt.Printf("STALL-SUMMARY reps=%d timeout=%v grace=%v slack=%v bound=%v\n", reps, timeout, grace, stallSlack, bound)
	for _, k := range keys {
		fmt.Printf("STALL-SUMMARY %-9s %-3s max %v\n", k.op, k.transport, worst[k].Round(time.Millisecond))
	}
	fmt.Printf("STALL-SUMMARY violations=%d\n", violations)
}

// stallSlack is what a survivor may take past the timeout and the grace:
// the ranks of a job share this machine's cores (4 ranks and a launcher
// on 2 here, each rank with GOMAXPROCS 1), so the goroutine whose timer
// fires may wait for a time slice behind the other ranks (the kernel's
// scheduling latency is a few ms, more when every core is busy), and
// after the grace the rank tells its peers it aborts (abort_blame.go's
// tellAll, which waits up to 100 ms for a notice that cannot leave) and
// closes its endpoint. 300 ms covers those with room.
const stallSlack = 300 * time.Millisecond

const (
	stallOpEnv     = "GOCCL_STALL_WORKER_OP"
	stallDirEnv    = "GOCCL_STALL_WORKER_DIR"
	stallTimeEnv   = "GOCCL_STALL_WORKER_TIMEOUT"
	stallVictim    = 1
	stallRanks     = 4
	stallLinePrefx = "STALLED "
)

func listEnv(name, def string) []string {
	s := os.Getenv(name)
	if s == "" {
		s = def
	}
	return strings.Split(s, ",")
}

// stallLine is what a survivor reported.
type stallLine struct {
	rank     int
	elapsed  time.Duration
	gocclErr bool
	peer     int
	aborted  bool
	err      string
}

// runStallJob runs one job of the worker under goccl run, stops the
// victim once every rank is in its loop, and returns the survivors'
// lines. Whatever happens, the victim is continued and killed and no
// rank outlives the call.
func runStallJob(t *testing.T, gocclBin, exe, op, transport string, timeout time.Duration) (lines []stallLine, err error) {
	dir, err := os.MkdirTemp("", "goccl-stall-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(gocclBin, "run", "-n", strconv.Itoa(stallRanks), "-grace", "1s", "--", exe, "-test.run=^TestStallBound$", "-test.count=1")
	cmd.Env = append(cleanEnv(), stallOpEnv+"="+op, stallDirEnv+"="+dir, stallTimeEnv+"="+timeout.String(), "GOCCL_TRANSPORT="+transport)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	killAll := func() {
		// SIGKILL ends a stopped process too; SIGCONT after it all the
		// same, so that nothing is left stopped if the kill was refused.
		for r := range stallRanks {
			if pid := readPid(dir, r); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
				syscall.Kill(pid, syscall.SIGCONT)
			}
		}
	}
	waited := make(chan struct{})
	defer func() {
		killAll()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-waited
		}
	}()
	got := make(chan stallLine, 4*stallRanks) // never blocks the reader: it must reach Wait
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			_, rest, ok := strings.Cut(sc.Text(), stallLinePrefx)
			if !ok {
				continue
			}
			if l, ok := parseStallLine(rest); ok {
				select {
				case got <- l:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
		cmd.Wait()
		close(waited)
		close(got)
	}()
	hang := time.NewTimer(30*time.Second + 4*timeout)
	defer hang.Stop()
	// Stop the victim a moment (random, so that it freezes anywhere in a
	// call) after every rank is in its loop.
	stopped := false
	poll := time.NewTicker(2 * time.Millisecond)
	defer poll.Stop()
	for !stopped {
		select {
		case l, ok := <-got:
			if !ok {
				return nil, errors.New("the job ended before the victim was stopped")
			}
			return nil, fmt.Errorf("rank %d failed before the victim was stopped: %s", l.rank, l.err)
		case <-hang.C:
			return nil, errors.New("the ranks never all started their loops")
		case <-poll.C:
		}
		all := true
		for r := range stallRanks {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("looping%d", r))); err != nil {
				all = false
			}
		}
		if !all {
			continue
		}
		time.Sleep(time.Duration(20+rand.IntN(200)) * time.Millisecond)
		if err := syscall.Kill(readPid(dir, stallVictim), syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("SIGSTOP rank %d: %v", stallVictim, err)
		}
		stopped = true
	}
	for len(lines) < stallRanks-1 {
		select {
		case l, ok := <-got:
			if !ok {
				return lines, fmt.Errorf("the job ended with %d survivor lines of %d", len(lines), stallRanks-1)
			}
			if l.rank == stallVictim {
				return lines, fmt.Errorf("the stopped rank reported: %s", l.err)
			}
			lines = append(lines, l)
		case <-hang.C:
			return lines, fmt.Errorf("only %d of %d survivors returned (a hang)", len(lines), stallRanks-1)
		}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].rank < lines[j].rank })
	return lines, nil
}

func readPid(dir string, rank int) int {
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pid%d", rank)))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// parseStallLine reads "rank=R ns=N goccl=B peer=P aborted=B err=Q".
func parseStallLine(s string) (stallLine, bool) {
	var l stallLine
	var ns int64
	var errq string
	if _, err := fmt.Sscanf(s, "rank=%d ns=%d goccl=%t peer=%d aborted=%t err=", &l.rank, &ns, &l.gocclErr, &l.peer, &l.aborted); err != nil {
		return l, false
	}
	_, errq, _ = strings.Cut(s, " err=")
	if uq, err := strconv.Unquote(errq); err == nil {
		errq = uq
	}
	l.elapsed, l.err = time.Duration(ns), errq
	return l, true
}

// stallWorker is one rank of a TestStallBound job: it loops over its op
// until a call fails, and reports that call's time and error.
func stallWorker() int {
	op, dir := os.Getenv(stallOpEnv), os.Getenv(stallDirEnv)
	timeout, err := time.ParseDuration(os.Getenv(stallTimeEnv))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("pid%d", rank)), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		fmt.Println(err)
		return 2
	}
	ctx := context.Background()
	c, err := goccl.Init(ctx, goccl.WithTimeout(timeout))
	if err != nil {
		fmt.Println("init:", err)
		return 2
	}
	defer c.Close()
	n := c.Size()
	// Messages large enough that a send to the victim goes by CMA over
	// shm (more than a ring holds) and fills the socket buffers over TCP.
	const elems = 2 << 20 // 8 MiB of float32
	a := make([]float32, elems)
	b := make([]float32, elems)
	var run func() error
	switch op {
	case "allreduce":
		run = func() error { return c.AllReduce(ctx, a, reduceop.Sum) }
	case "broadcast":
		run = func() error { return c.Broadcast(ctx, a, 0) }
	case "alltoall":
		run = func() error { return c.AllToAll(ctx, a, b) }
	case "barrier":
		run = func() error { return c.Barrier(ctx) }
	case "sendrecv":
		// A ring of exchanges: rank 0's pending operation is a send to
		// the victim, rank 2's a receive from it.
		s, r := a[:elems/2], b[:elems/2]
		run = func() error {
			w := c.SendAsync(ctx, s, (rank+1)%n, 7)
			err := c.Recv(ctx, r, (rank+n-1)%n, 7)
			return errors.Join(err, w.Wait(ctx))
		}
	default:
		fmt.Println("unknown op", op)
		return 2
	}
	for i := 0; ; i++ {
		start := time.Now()
		err := run()
		el := time.Since(start)
		if err != nil {
			var ge *goccl.Error
			isG := errors.As(err, &ge)
			peer := -1
			if isG {
				peer = ge.Peer
			}
			fmt.Printf("%srank=%d ns=%d goccl=%t peer=%d aborted=%t err=%q\n", stallLinePrefx,
				rank, el.Nanoseconds(), isG, peer, errors.Is(err, goccl.ErrAborted), err.Error())
			return 0
		}
		if i == 0 {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("looping%d", rank)), nil, 0o600)
		}
	}
}
