package goccl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// The transport selection tests start real processes on this host: under
// `goccl run` with no configuration their ranks must talk over shm, and
// over TCP with GOCCL_TRANSPORT=tcp. A child (envSelectChild set) runs
// one rank: an allreduce, then a "VIA rank=R peer=P transport=T" line per
// peer from Comm.TransportFor; with GOCCL_DEBUG=info Init logs the same
// choice ("goccl peer" peer=P transport=T).

const envSelectChild = "GOCCL_TEST_SELECT_CHILD"

var (
	viaLine   = regexp.MustCompile(`(?m)VIA rank=(\d+) peer=(\d+) transport=(\w*)$`)
	debugPeer = regexp.MustCompile(`(?m)msg="goccl peer" rank=(\d+) peer=(\d+) transport=(\w*)$`)
)

func TestTransportSelection(t *testing.T) {
	if os.Getenv(envSelectChild) != "" {
		selectChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("transport/shm is Linux only")
	}
	dir := buildBinaries(t, "./cmd/goccl")
	const n = 3
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"default", nil, "shm"},
		{"auto", []string{"GOCCL_TRANSPORT=auto"}, "shm"},
		{"tcp", []string{"GOCCL_TRANSPORT=tcp"}, "tcp"},
		{"shm", []string{"GOCCL_TRANSPORT=shm"}, "shm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := cleanEnv(append([]string{envSelectChild + "=1", "GOCCL_DEBUG=info"}, tc.env...)...)
			if tc.env == nil {
				env = withoutVar(env, "GOCCL_TRANSPORT")
			}
			out, err := runJob(t, 2*time.Minute, env, filepath.Join(dir, "goccl"), "run", "-n", strconv.Itoa(n), "--",
				os.Args[0], "-test.run=^TestTransportSelection$", "-test.count=1")
			if err != nil {
				t.Fatalf("job failed: %v\n%s", err, out)
			}
			checkVia(t, out, viaLine, n, tc.want)
			checkVia(t, out, debugPeer, n, tc.want)
		})
	}
}

// checkVia checks that out has one line of re for every ordered pair of
// the n ranks, each naming transport want.
func checkVia(t *testing.T, out string, re *regexp.Regexp, n int, want string) {
	t.Helper()
	seen := map[[2]int]int{}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(m[1])
		p, _ := strconv.Atoi(m[2])
		seen[[2]int{r, p}]++
		if m[3] != want {
			t.Errorf("rank %d reaches %d over %q, want %q", r, p, m[3], want)
		}
	}
	for r := range n {
		for p := range n {
			if k := seen[[2]int{r, p}]; p != r && k != 1 {
				t.Errorf("rank %d: %d lines %q for peer %d, want 1", r, k, re, p)
			}
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

func withoutVar(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// selectChild is one rank of TestTransportSelection.
func selectChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := goccl.Init(ctx, goccl.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, me := c.Size(), c.Rank()
	// Enough for the large-message path too (shm's single copy).
	buf := make([]float32, 1<<18)
	for i := range buf {
		buf[i] = float32(me)
	}
	if err := c.AllReduce(ctx, buf, reduceop.Sum); err != nil {
		t.Fatal(err)
	}
	if want := float32(n * (n - 1) / 2); buf[0] != want || buf[len(buf)-1] != want {
		t.Fatalf("rank %d: allreduce gave %v, want %v", me, buf[0], want)
	}
	var b strings.Builder
	for p := range n {
		if p != me {
			fmt.Fprintf(&b, "VIA rank=%d peer=%d transport=%s\n", me, p, c.TransportFor(p))
		}
	}
	fmt.Print(b.String())
}

// TestKillRankShm is TestKillRankTCP over shm (GOCCL_TRANSPORT=shm) and
// over TCP by name (GOCCL_TRANSPORT=tcp): SIGKILL one rank in a loop of
// collectives; every survivor's call fails naming the lost rank, wrapping
// ErrPeerClosed and ErrAborted, the next call fails at once, and Close
// leaves no goroutine or descriptor behind. The survivors' debug logs
// show which transport ran.
func TestKillRankShm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("transport/shm is Linux only")
	}
	const n, victim = 4, 2
	for _, kind := range []string{"shm", "tcp"} {
		for _, op := range []string{"allreduce", "alltoall"} {
			t.Run(kind+"/"+op, func(t *testing.T) {
				t.Setenv("GOCCL_TRANSPORT", kind)
				t.Setenv("GOCCL_DEBUG", "info")
				// TestKillRankTCP runs with the default, lazy links: here
				// TCP links every pair at Init.
				t.Setenv("GOCCL_CONNECT", "eager")
				outs := runFaultJob(t, "TestKillRankTCP", n, op, victim)
				for r, out := range outs {
					if r == victim {
						continue
					}
					f := parseFault(out)
					switch {
					case f == nil:
						t.Errorf("rank %d reported no fault:\n%s", r, out)
					case !strings.Contains(out, fmt.Sprintf(`msg="goccl peer" rank=%d peer=%d transport=%s`, r, victim, kind)):
						t.Errorf("rank %d: no debug line saying it reached rank %d over %s:\n%s", r, victim, kind, out)
					case f["peer"] != strconv.Itoa(victim):
						t.Errorf("rank %d: error names peer %s, want the lost rank %d:\n%s", r, f["peer"], victim, out)
					case f["peerclosed"] != "true" || f["op"] != opNames[op]:
						t.Errorf("rank %d: want ErrPeerClosed in %s:\n%s", r, opNames[op], out)
					case f["wrapsaborted"] != "true" || f["aborted"] != "true":
						t.Errorf("rank %d: the error does not wrap ErrAborted, or the next call did not fail fast:\n%s", r, out)
					case atoi(f["ms"]) > faultTimeout.Milliseconds()+2000:
						t.Errorf("rank %d: took %s ms, more than the timeout + 2 s", r, f["ms"])
					case atoi(f["goroutines"]) > 0 || atoi(f["fds"]) > 0:
						t.Errorf("rank %d: leaked %s goroutines and %s file descriptors after Close:\n%s", r, f["goroutines"], f["fds"], out)
					}
				}
			})
		}
	}
}
