package goccl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/cpu"
	"github.com/goccl/goccl/internal/launch"
	"github.com/goccl/goccl/reduceop"
)

// TestInitMemWithoutLauncher holds the README to its word: with transport
// mem and no launcher variables, Init is a one-rank job in this process,
// and its debug log says so.
func TestInitMemWithoutLauncher(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
	}{
		{"GOCCL_TRANSPORT", []Option{fakeEnv(map[string]string{"GOCCL_TRANSPORT": "mem", EnvDebug: "info"})}},
		{"WithTransport", []Option{fakeEnv(map[string]string{EnvDebug: "info"}), WithTransport("mem")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			c, err := Init(t.Context(), append(tt.opts, withDebugOutput(&buf))...)
			if err != nil {
				t.Fatalf("Init: %v", err)
			}
			defer c.Close()
			if c.Rank() != 0 || c.Size() != 1 {
				t.Errorf("rank %d of %d; want 0 of 1", c.Rank(), c.Size())
			}
			x := []float32{3, -1}
			if err := c.AllReduce(t.Context(), x, reduceop.Avg); err != nil {
				t.Fatalf("AllReduce: %v", err)
			}
			if x[0] != 3 || x[1] != -1 {
				t.Errorf("AllReduce(Avg) over one rank = %v; want [3 -1]", x)
			}
			out := buf.String()
			for _, want := range []string{"one-rank job in this process", "launcher=none", "transport=mem"} {
				if !strings.Contains(out, want) {
					t.Errorf("debug log has no %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestInitMemWithoutLauncherQuiet: the one-rank job logs nothing unless
// GOCCL_DEBUG asks.
func TestInitMemWithoutLauncherQuiet(t *testing.T) {
	var buf bytes.Buffer
	c, err := Init(t.Context(), fakeEnv(map[string]string{"GOCCL_TRANSPORT": "mem"}), withDebugOutput(&buf))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	c.Close()
	if buf.Len() != 0 {
		t.Errorf("logged without GOCCL_DEBUG:\n%s", buf.String())
	}
}

// TestInitNoLauncher: without launcher variables and without mem, Init
// fails at once and says every way to get a job.
func TestInitNoLauncher(t *testing.T) {
	for _, env := range []map[string]string{nil, {"GOCCL_TRANSPORT": "tcp"}} {
		c, err := Init(t.Context(), fakeEnv(env))
		if err == nil {
			c.Close()
			t.Fatalf("env %v: Init succeeded without a launcher", env)
		}
		if testing.Verbose() {
			t.Log(err)
		}
		if !errors.Is(err, launch.ErrNotFound) {
			t.Errorf("env %v: %v does not wrap launch.ErrNotFound", env, err)
		}
		for _, want := range []string{"goccl run -n N", "torchrun", "mpirun", "srun", "RANK", "WORLD_SIZE", "MASTER_ADDR", "GOCCL_TRANSPORT=mem", "one-rank job"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("env %v: error does not say %q: %v", env, want, err)
			}
		}
	}
}

// TestInitMemWithLauncher: launcher variables still rule; mem cannot run
// a world of several processes, and says what to use instead.
func TestInitMemWithLauncher(t *testing.T) {
	env := map[string]string{"GOCCL_TRANSPORT": "mem", "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
	c, err := Init(t.Context(), fakeEnv(env))
	if err == nil {
		c.Close()
		t.Fatal("Init over mem with WORLD_SIZE=2 succeeded")
	}
	if !strings.Contains(err.Error(), "NewLocal") {
		t.Errorf("error does not point at NewLocal: %v", err)
	}
}

// initRanks runs Init for size ranks as goroutines of this process, each
// with the transport kind, and returns their communicators (closed when
// the test ends) or the ranks' errors, joined, less the cancellations
// that a failure causes. All of them: the first failure cancels the
// others, and a rank whose store closed under it (rank 0 cancelled) fails
// with that, so the lowest rank's error need not be the cause.
func initRanks(t *testing.T, size int, kind string, opts ...Option) ([]*Comm, error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	comms := make([]*Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			comms[r], errs[r] = Init(ctx, append([]Option{fakeEnv(nil), WithTransport(kind), WithTimeout(20 * time.Second),
				WithEnv(Env{Rank: r, Size: size, LocalRank: -1, LocalSize: -1, MasterAddr: "127.0.0.1", MasterPort: port, Source: "options"})},
				opts...)...)
			if errs[r] != nil {
				cancel() // the others would wait for this rank
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	var failed []error
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return nil, errors.Join(failed...)
	}
	return comms, errors.Join(errs...)
}

// pretendHosts makes Init see the ranks of this process on the hosts
// that host names, for the test's duration.
func pretendHosts(t *testing.T, host func(rank int) string) {
	testHostID = host
	t.Cleanup(func() { testHostID = nil })
}

// TestInitTransportAuto: with the default transport, ranks of one host
// talk over shm and the others over TCP, and collectives over the mix
// are right.
func TestInitTransportAuto(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int
		hosts func(rank int) string
		kind  string
	}{
		{"one host", 3, nil, ""},
		{"one host, auto", 3, nil, "auto"},
		// Hosts interleaved, so that shm numbers the ranks of a host
		// otherwise than the job: odd and even, and a host of its own.
		{"three hosts", 5, func(r int) string { return []string{"a", "b", "a", "c", "b"}[r] }, "auto"},
		{"a rank per host", 3, func(r int) string { return strconv.Itoa(r) }, "auto"},
		{"tcp", 3, nil, "tcp"},
		{"shm", 3, nil, "shm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.hosts != nil {
				pretendHosts(t, tc.hosts)
			}
			comms, err := initRanks(t, tc.size, tc.kind)
			if err != nil {
				t.Fatal(err)
			}
			for r, c := range comms {
				for p := range tc.size {
					want := "shm"
					switch {
					case tc.kind == "tcp", tc.hosts != nil && tc.hosts(p) != tc.hosts(r) && p != r:
						want = "tcp"
					case tc.hosts != nil && p == r && !slices.ContainsFunc(others1(tc.size, r), func(q int) bool { return tc.hosts(q) == tc.hosts(r) }):
						want = "tcp" // alone on its host: no shm at all
					}
					if got := c.TransportFor(p); got != want {
						t.Errorf("rank %d: TransportFor(%d) = %q, want %q", r, p, got, want)
					}
				}
				if got := c.TransportFor(tc.size); got != "" {
					t.Errorf("TransportFor(%d) = %q, want \"\"", tc.size, got)
				}
			}
			// An allreduce over every pair of ranks (alltoall) and a sum.
			var wg sync.WaitGroup
			errs := make([]error, tc.size)
			for r, c := range comms {
				wg.Go(func() {
					ctx := t.Context()
					in := make([]int32, tc.size)
					out := make([]int32, tc.size)
					for p := range in {
						in[p] = int32(100*r + p)
					}
					if errs[r] = c.AllToAll(ctx, in, out); errs[r] != nil {
						return
					}
					for p, v := range out {
						if v != int32(100*p+r) {
							errs[r] = fmt.Errorf("rank %d: alltoall from %d: %d, want %d", r, p, v, 100*p+r)
							return
						}
					}
					sum := []float64{float64(r)}
					if errs[r] = c.AllReduce(ctx, sum, reduceop.Sum); errs[r] == nil && sum[0] != float64(tc.size*(tc.size-1)/2) {
						errs[r] = fmt.Errorf("rank %d: allreduce %v", r, sum[0])
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// others1 lists the ranks of [0, size) but r.
func others1(size, r int) []int {
	var out []int
	for q := range size {
		if q != r {
			out = append(out, q)
		}
	}
	return out
}

// TestInitTransportShmOtherHost: GOCCL_TRANSPORT=shm fails, naming the
// ranks on another host, when the job spans hosts.
func TestInitTransportShmOtherHost(t *testing.T) {
	pretendHosts(t, func(r int) string { return []string{"a", "b", "a", "b"}[r] })
	_, err := initRanks(t, 4, "shm")
	if err == nil || !strings.Contains(err.Error(), "ranks [1 3] are not on this host") && !strings.Contains(err.Error(), "ranks [0 2] are not on this host") {
		t.Fatalf("Init over shm across hosts: %v, want an error naming the ranks on the other host", err)
	}
}

func TestInitUnknownTransport(t *testing.T) {
	_, err := Init(t.Context(), fakeEnv(nil), WithTransport("verbs"), WithEnv(Env{Size: 1, MasterAddr: "127.0.0.1", MasterPort: 1}))
	if err == nil || !strings.Contains(err.Error(), "auto, tcp, shm, ib or mem") {
		t.Fatalf("Init over verbs: %v", err)
	}
}

// TestInitSpin: Init's transports poll as GOCCL_SPIN says, and by
// default, when the launcher puts more ranks on the host than it has
// CPUs, poll and yield the core between polls; the debug log says which.
func TestInitSpin(t *testing.T) {
	over := cpu.Online() + 1
	for _, tt := range []struct {
		name      string
		env       map[string]string
		localSize int
		want      string
	}{
		{"default", nil, 1, "spin=default yield=false"},
		{"set", map[string]string{EnvSpin: "40us"}, 1, "spin=40µs yield=false"},
		{"off", map[string]string{EnvSpin: "0"}, 1, "spin=off yield=false"},
		{"yield", map[string]string{EnvSpin: "yield"}, 1, "spin=10ms yield=true"},
		{"oversubscribed", nil, over, "spin=10ms yield=true"},
		{"oversubscribed but set", map[string]string{EnvSpin: "40us"}, over, "spin=40µs yield=false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"GOCCL_TRANSPORT": "mem", EnvDebug: "info"}
			maps.Copy(env, tt.env)
			var buf bytes.Buffer
			c, err := Init(t.Context(), fakeEnv(env), withDebugOutput(&buf),
				WithEnv(Env{Rank: 0, Size: 1, LocalRank: 0, LocalSize: tt.localSize, Source: "options"}))
			if err != nil {
				t.Fatalf("Init: %v", err)
			}
			c.Close()
			if out := buf.String(); !strings.Contains(out, tt.want) {
				t.Errorf("debug log has no %q:\n%s", tt.want, out)
			}
		})
	}
}
