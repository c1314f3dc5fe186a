//go:build linux

package testutil

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The flood tests of store and transport/tcp attack a listener with
// thousands of connections from a child process: the test binary again,
// running the test's attacking side (which the environment selects), so
// that the descriptors the listening process holds can be counted from
// /proc/self/fd without the attacker's own sockets in the count.
// Counting only the listener's sockets in one process would need matching
// socket inodes against /proc/net/tcp, and would miss any other
// descriptor it leaked.

// Lines the attacking child prints.
const (
	FloodOpened = "GOCCL-FLOOD-OPENED" // once every connection is open
	FloodReport = "GOCCL-FLOOD-REPORT" // the prefix of its line of counts
)

// Flood is a running attacker process.
type Flood struct {
	cmd    *exec.Cmd
	out    *Buffer
	done   chan struct{}
	report string
}

// StartFlood runs the test binary's test (a -test.run pattern) as the
// attacker, with env added to this process's environment, and returns once
// the child has printed FloodOpened.
func StartFlood(t testing.TB, test string, env ...string) *Flood {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+test, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	f := &Flood{cmd: cmd, out: new(Buffer), done: make(chan struct{})}
	cmd.Stderr = f.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			f.out.Write([]byte(line + "\n"))
			switch {
			case line == FloodOpened:
				close(opened)
			case strings.HasPrefix(line, FloodReport):
				f.report = strings.TrimSpace(strings.TrimPrefix(line, FloodReport))
			}
		}
	}()
	select {
	case <-opened:
	case <-f.done:
		cmd.Wait()
		t.Fatalf("the attacker ended before opening its connections:\n%s", f.out.String())
	}
	return f
}

// Wait waits for the attacker to end, fails the test if it failed, and
// returns its report line (after FloodReport).
func (f *Flood) Wait(t testing.TB) string {
	t.Helper()
	<-f.done
	if err := f.cmd.Wait(); err != nil {
		t.Errorf("attacker: %v\n%s", err, f.out.String())
	}
	return f.report
}

// OpenFDs counts this process's open descriptors, skipping the test where
// /proc cannot say.
func OpenFDs(t testing.TB) int {
	t.Helper()
	n, err := openFDs()
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return n
}

func openFDs() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	return len(ents), err
}

// SampleFDs counts this process's open descriptors every millisecond
// until the function it returns is called, which returns the most it saw.
func SampleFDs() (stop func() int) {
	most, quit, done := 0, make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			if n, err := openFDs(); err == nil && n > most {
				most = n
			}
			select {
			case <-quit:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() int {
		close(quit)
		<-done
		return most
	}
}

// RaiseFileLimit raises the soft limit on open files to the hard limit
// (Go does so at start-up too, but a test should not depend on it) and
// skips the test if that leaves fewer than need.
func RaiseFileLimit(t testing.TB, need int) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Logf("setrlimit: %v", err)
			syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		}
	}
	if lim.Cur < uint64(need) {
		t.Skipf("open file limit %d, need %d", lim.Cur, need)
	}
}

// FloodArgs reads the attacker's two settings from the environment: how
// many silent connections to open (nEnv) and how soon after its dial the
// listener must close each (boundEnv).
func FloodArgs(t testing.TB, nEnv, boundEnv string) (n int, bound time.Duration) {
	t.Helper()
	n, err := strconv.Atoi(os.Getenv(nEnv))
	if err != nil {
		t.Fatal(err)
	}
	if bound, err = time.ParseDuration(os.Getenv(boundEnv)); err != nil {
		t.Fatal(err)
	}
	return n, bound
}

// FloodResult is how one attacking connection ended.
type FloodResult struct {
	Name  string // its garbage's name, or "silent"
	Bytes int64  // what the listener sent before it closed the connection
	Err   error  // the read's: os.ErrDeadlineExceeded if it was still open at the bound
}

// Attack is the attacker's side: ten connections for each garbage
// payload, written at once (first, so that the listener parses them
// rather than drop them for being over its cap), then n silent ones, to
// addr. Once all are open it prints FloodOpened; then it waits, at most
// bound from each connection's dial, for the listener to close it.
func Attack(t testing.TB, addr string, garbage map[string][]byte, n int, bound time.Duration) []FloodResult {
	t.Helper()
	RaiseFileLimit(t, n+len(garbage)*10+100)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []FloodResult
	)
	watch := func(name string, c net.Conn, payload []byte) {
		dialed := time.Now()
		wg.Go(func() {
			defer c.Close()
			if payload != nil {
				c.Write(payload) // may fail: the listener can close first
			}
			c.SetReadDeadline(dialed.Add(bound))
			got, err := io.Copy(io.Discard, c)
			mu.Lock()
			results = append(results, FloodResult{name, got, err})
			mu.Unlock()
		})
	}
	for range 10 {
		for name, b := range garbage {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			watch(name, c, b)
		}
	}
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		watch("silent", c, nil)
	}
	fmt.Println(FloodOpened)
	wg.Wait()
	return results
}
