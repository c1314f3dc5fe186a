package goccl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
)

// These tests run Init over transport/ib with the fake fabric of
// transport/ib/ibfake: every rank of the process gets a fake HCA of its
// own (hca<rank>), as if each were a host with one adapter.

// fakeIB makes Init's ranks use fabric f for the test's duration; ranks
// for which up returns false get no device (up nil: all get one). When
// the test ends, after the communicators are closed, it checks that no
// verbs object was misused or left open.
func fakeIB(t *testing.T, f *ibfake.Fabric, up func(rank int) bool) {
	testIBConfig = func(r int, c *ib.Config) {
		c.Provider, c.HCA = f.Provider(), ibDev(r)
		if up != nil && !up(r) {
			c.Provider = noHCA{}
		}
		// Peers that vanish are noticed within a few ms, not a second.
		c.Heartbeat = 5 * time.Millisecond
	}
	t.Cleanup(func() {
		testIBConfig = nil
		if m := f.Misuse(); len(m) > 0 {
			t.Errorf("verbs objects misused: %q", m)
		}
		if u := f.Unclosed(); len(u) > 0 {
			t.Errorf("devices left open: %q", u)
		}
	})
}

func ibDev(rank int) string { return fmt.Sprintf("hca%d", rank) }

// noHCA is a verbs provider on a host without an adapter.
type noHCA struct{}

func (noHCA) Open(name string, port, gidIndex int) (ib.Device, error) {
	return nil, errors.New("no RDMA devices")
}

// checkCollectives runs an alltoall, an allreduce of a large message
// (rendezvous on ib) and a broadcast over comms and compares them with
// what they must give.
func checkCollectives(t *testing.T, comms []*Comm) {
	t.Helper()
	n := len(comms)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range comms {
		wg.Go(func() {
			ctx := t.Context()
			in, out := make([]int32, n), make([]int32, n)
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
			big := make([]float64, 100_003) // 800 KB: rendezvous, not eager
			for i := range big {
				big[i] = float64(r*i + 1)
			}
			if errs[r] = c.AllReduce(ctx, big, reduceop.Sum); errs[r] != nil {
				return
			}
			for i, v := range big {
				if want := float64(n*(n-1)/2*i + n); v != want {
					errs[r] = fmt.Errorf("rank %d: allreduce[%d] = %v, want %v", r, i, v, want)
					return
				}
			}
			b := []byte(strings.Repeat(fmt.Sprint(r), 40_000))
			if errs[r] = c.Broadcast(ctx, b, 2); errs[r] != nil {
				return
			}
			if string(b) != strings.Repeat("2", 40_000) {
				errs[r] = fmt.Errorf("rank %d: broadcast from 2 gave %.10q...", r, b)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// wantVia checks that every rank of comms reaches each peer over the
// transport want(rank, peer) names.
func wantVia(t *testing.T, comms []*Comm, want func(r, p int) string) {
	t.Helper()
	for r, c := range comms {
		for p := range comms {
			if p == r {
				continue
			}
			if got, w := c.TransportFor(p), want(r, p); got != w {
				t.Errorf("rank %d: TransportFor(%d) = %q, want %q", r, p, got, w)
			}
		}
	}
}

// TestInitIB: GOCCL_TRANSPORT=ib connects every pair of a 4-rank job over
// transport/ib, and collectives over it are right.
func TestInitIB(t *testing.T) {
	fakeIB(t, ibfake.New(), nil)
	comms, err := initRanks(t, 4, "ib")
	if err != nil {
		t.Fatal(err)
	}
	wantVia(t, comms, func(r, p int) string { return "ib" })
	checkCollectives(t, comms)
}

// TestInitAutoIB: auto takes ib between hosts when every rank has an
// active port, shm within a host, and TCP between hosts when a single
// rank has no adapter (ranks must agree: a pair that chose differently
// would wait in each other's exchange).
func TestInitAutoIB(t *testing.T) {
	hosts := func(r int) string { return []string{"a", "b", "a", "b"}[r] }
	for _, tc := range []struct {
		name    string
		up      func(r int) bool
		between string
	}{
		{"every rank", nil, "ib"},
		{"rank 3 without", func(r int) bool { return r != 3 }, "tcp"},
		{"no rank", func(int) bool { return false }, "tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pretendHosts(t, hosts)
			fakeIB(t, ibfake.New(), tc.up)
			comms, err := initRanks(t, 4, "auto")
			if err != nil {
				t.Fatal(err)
			}
			wantVia(t, comms, func(r, p int) string {
				if hosts(r) == hosts(p) {
					return "shm"
				}
				return tc.between
			})
			checkCollectives(t, comms)
		})
	}
	t.Run("one host", func(t *testing.T) {
		// All ranks on one host: shm only, no queue pair at all.
		f := ibfake.New()
		fakeIB(t, f, nil)
		comms, err := initRanks(t, 3, "auto")
		if err != nil {
			t.Fatal(err)
		}
		wantVia(t, comms, func(r, p int) string { return "shm" })
		for r := range comms {
			if d := f.Device(ibDev(r)); d != nil && d.QPTo(ibDev((r+1)%3)) != nil {
				t.Errorf("rank %d has a queue pair on one host", r)
			}
		}
	})
}

// TestInitIBNoDevice: GOCCL_TRANSPORT=ib on a host without an adapter
// fails at Init naming the device problem, before the store is dialled.
func TestInitIBNoDevice(t *testing.T) {
	testIBConfig = func(r int, c *ib.Config) { c.Provider = noHCA{} }
	t.Cleanup(func() { testIBConfig = nil })
	err := initIBAlone(t)
	if err == nil || !strings.Contains(err.Error(), "no usable RDMA device") || !strings.Contains(err.Error(), "no RDMA devices") {
		t.Fatalf("Init over ib without a device: %v", err)
	}
}

// initIBAlone runs Init over ib as rank 1 of 2 against a store address
// that a listener of the test holds, and fails the test if Init dialled
// it; it returns Init's error.
func initIBAlone(t *testing.T) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := Init(ctx, fakeEnv(nil), WithTransport("ib"), WithTimeout(10*time.Second),
		WithEnv(Env{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, MasterAddr: "127.0.0.1",
			MasterPort: l.Addr().(*net.TCPAddr).Port, Source: "options"}))
	if err == nil {
		c.Close()
		t.Fatal("Init over ib succeeded")
	}
	// A connection Init made is in the backlog by now: Accept takes it at
	// once. An empty backlog makes Accept fail on the past deadline.
	l.(*net.TCPListener).SetDeadline(time.Now())
	if conn, aerr := l.Accept(); aerr == nil {
		conn.Close()
		t.Errorf("Init dialled the store before failing: %v", err)
	}
	return err
}

// TestInitIBQPError moves every queue pair of rank 2 to the error state
// (its adapter failed) while 4 ranks run allreduces of 1 MiB over ib:
// every survivor's call fails naming rank 2 and wrapping ErrPeerClosed
// and ErrAborted, as README's "Errors and timeouts" promises, and its
// next call fails at once; until then the sums are right.
func TestInitIBQPError(t *testing.T) {
	const n, victim = 4, 2
	f := ibfake.New()
	fakeIB(t, f, nil)
	comms, err := initRanks(t, n, "ib")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var rounds atomic.Int64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			buf := make([]float32, 1<<18)
			for ctx.Err() == nil {
				for j := range buf {
					buf[j] = float32(r + 1)
				}
				if err := c.AllReduce(ctx, buf, reduceop.Sum); err != nil {
					errs[r] = err
					return
				}
				if buf[0] != 10 || buf[len(buf)-1] != 10 {
					errs[r] = fmt.Errorf("rank %d: wrong sum %v", r, buf[0])
					return
				}
				if r == 0 {
					rounds.Add(1)
				}
			}
		})
	}
	for rounds.Load() < 3 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	// All at once: a queue pair broken after the others could carry the
	// victim's own verdict (blaming whichever peer it lost first).
	f.Device(ibDev(victim)).Break()
	wg.Wait()
	for r, err := range errs {
		var ge *Error
		switch {
		case r == victim:
			if err == nil {
				t.Errorf("rank %d (its queue pairs broken): no error", r)
			}
		case !errors.As(err, &ge) || ge.Peer != victim || !errors.Is(err, ErrPeerClosed) || !errors.Is(err, ErrAborted):
			t.Errorf("rank %d: %v, want a goccl.Error naming peer %d, wrapping ErrPeerClosed and ErrAborted", r, err, victim)
		default:
			// Aborted: the next call fails at once, without waiting.
			if err := comms[r].Barrier(ctx); !errors.Is(err, ErrAborted) {
				t.Errorf("rank %d: call after the failure: %v, want ErrAborted", r, err)
			}
		}
		t.Logf("rank %d: %v", r, err)
	}
}
