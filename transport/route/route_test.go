package route_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/route"
	"github.com/goccl/goccl/transport/transporttest"
)

// hostOf puts the job's ranks on two pretend hosts, odd and even, so that
// no host's ranks are a prefix of the job.
func hostOf(r int) int { return r % 2 }

// hostRanks lists the job ranks on host h, highest first: the local
// endpoint's numbering then differs from the job's for every rank but one,
// which makes the router's translation of ranks show.
func hostRanks(size, h int) []int {
	var rs []int
	for r := size - 1; r >= 0; r-- {
		if hostOf(r) == h {
			rs = append(rs, r)
		}
	}
	return rs
}

// newLocal is the "shm" of a pretend host: a mem mesh of its ranks.
type localFunc func(t *testing.T, ranks []int) []transport.Endpoint

func memLocal(t *testing.T, ranks []int) []transport.Endpoint { return mem.New(len(ranks)) }

// routed builds a job of size ranks whose endpoints route a rank's host
// peers over the local meshes that newLocal makes and every other peer
// over one mem mesh of the whole job.
func routed(t *testing.T, size int, newLocal localFunc) []*route.Endpoint {
	t.Helper()
	all := mem.New(size)
	eps := make([]*route.Endpoint, size)
	for h := range 2 {
		ranks := hostRanks(size, h)
		if len(ranks) == 0 {
			continue
		}
		local := newLocal(t, ranks)
		for i, r := range ranks {
			ep, err := route.New(r, size,
				route.Route{Name: "local", Endpoint: local[i], Ranks: ranks},
				route.Route{Name: "net", Endpoint: all[r]})
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
			eps[r] = ep
		}
	}
	return eps
}

func asEndpoints(eps []*route.Endpoint) []transport.Endpoint {
	out := make([]transport.Endpoint, len(eps))
	for i, ep := range eps {
		out[i] = ep
	}
	return out
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return asEndpoints(routed(t, size, memLocal))
	})
}

// TestConformanceOneRoute runs the suite over a router with a single
// route that spans the job (Init's tcp-only and shm-only jobs).
func TestConformanceOneRoute(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		out := make([]transport.Endpoint, size)
		for r, m := range mem.New(size) {
			ep, err := route.New(r, size, route.Route{Name: "tcp", Endpoint: m})
			if err != nil {
				t.Fatal(err)
			}
			out[r] = ep
		}
		return out
	})
}

func TestVia(t *testing.T) {
	eps := routed(t, 5, memLocal)
	defer closeAll(eps)
	for r, ep := range eps {
		for p := range 5 {
			want := "net"
			if hostOf(p) == hostOf(r) {
				want = "local"
			}
			if got := ep.Via(p); got != want {
				t.Errorf("rank %d: Via(%d) = %q, want %q", r, p, got, want)
			}
		}
		if got := ep.Via(5); got != "" {
			t.Errorf("Via(5) = %q, want \"\"", got)
		}
	}
}

// TestLocalTraffic checks that a host's messages stay on its local route
// and the others on the network route: each mesh counts what it carried.
func TestLocalTraffic(t *testing.T) {
	const size = 4
	ctx := ctxFor(t)
	all := make([]*transport.CountingEndpoint, size)
	for r, m := range mem.New(size) {
		all[r] = transport.Counting(m)
	}
	locals := make([]*transport.CountingEndpoint, size)
	eps := make([]*route.Endpoint, size)
	for h := range 2 {
		ranks := hostRanks(size, h)
		for i, m := range mem.New(len(ranks)) {
			locals[ranks[i]] = transport.Counting(m)
		}
		for _, r := range ranks {
			ep, err := route.New(r, size,
				route.Route{Name: "local", Endpoint: locals[r], Ranks: ranks},
				route.Route{Name: "net", Endpoint: all[r]})
			if err != nil {
				t.Fatal(err)
			}
			eps[r] = ep
		}
	}
	defer closeAll(eps)
	// Every rank sends its rank to every rank, itself included.
	var reqs []transport.Request
	for r, ep := range eps {
		for p := range size {
			reqs = append(reqs, ep.Isend(p, 9, []byte{byte(r)}))
		}
	}
	for r, ep := range eps {
		for p := range size {
			b := make([]byte, 1)
			if err := ep.Irecv(p, 9, b).Wait(ctx); err != nil || b[0] != byte(p) {
				t.Fatalf("rank %d from %d: %v, got %d", r, p, err, b[0])
			}
		}
	}
	for _, req := range reqs {
		if err := req.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for r := range size {
		// Two ranks per host: the local mesh carries the message to the
		// host peer and to oneself, the network the two to the other host.
		if got := locals[r].Stats().Total().SentMsgs; got != 2 {
			t.Errorf("rank %d: %d messages on the local route, want 2", r, got)
		}
		if got := all[r].Stats().Total().SentMsgs; got != 2 {
			t.Errorf("rank %d: %d messages on the network route, want 2", r, got)
		}
	}
}

// lossy is an endpoint whose link losses the test announces.
type lossy struct {
	transport.Endpoint
	mu sync.Mutex
	f  func(*transport.PeerError)
}

func (l *lossy) OnPeerLoss(f func(*transport.PeerError)) { l.mu.Lock(); l.f = f; l.mu.Unlock() }

func (l *lossy) lose(peer int) {
	l.mu.Lock()
	f := l.f
	l.mu.Unlock()
	f(&transport.PeerError{Op: "recv", Peer: peer, Err: transport.ErrPeerClosed})
}

// TestPeerLossOnce: a peer that both routes lose is reported once, by its
// job rank; a loss before anyone listens is not swallowed for later.
func TestPeerLossOnce(t *testing.T) {
	const size = 4
	ranks := hostRanks(size, 0) // [2 0]
	local := []*lossy{{Endpoint: mem.New(2)[1]}}
	all := mem.New(size)
	net := &lossy{Endpoint: all[0]}
	ep, err := route.New(0, size, route.Route{Name: "shm", Endpoint: local[0], Ranks: ranks}, route.Route{Name: "tcp", Endpoint: net})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	defer func() {
		for _, m := range all[1:] {
			m.Close()
		}
	}()
	// Nobody listens yet: nothing to report, and nothing remembered.
	local[0].lose(0)

	var mu sync.Mutex
	var got []string
	ep.OnPeerLoss(func(pe *transport.PeerError) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, pe.Error())
		if !errors.Is(pe, transport.ErrPeerClosed) {
			t.Errorf("loss %v does not wrap ErrPeerClosed", pe)
		}
	})
	local[0].lose(0) // job rank 2, seen by shm
	net.lose(2)      // job rank 2 again, seen by tcp
	net.lose(3)      // job rank 3
	local[0].lose(0)
	local[0].lose(7) // no such rank on the route: ignored
	want := []string{"transport: recv peer 2: peer closed", "transport: recv peer 3: peer closed"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("losses reported: %q, want %q", got, want)
	}
}

// TestStrayJobRank: a stray message retired on the local route is
// reported with the sender's job rank.
func TestStrayJobRank(t *testing.T) {
	const size = 4
	ctx := ctxFor(t)
	eps := routed(t, size, memLocal)
	defer closeAll(eps)
	type stray struct {
		from int
		tag  transport.Tag
		head string
	}
	var mu sync.Mutex
	var got []stray
	eps[0].OnStray(func(transport.Tag) bool { return false }, func(from int, tag transport.Tag, head []byte) {
		mu.Lock()
		got = append(got, stray{from, tag, string(head)})
		mu.Unlock()
	})
	// 2 is on 0's host (its local rank is 0, 0's is 1); 1 is not.
	for _, p := range []int{2, 1} {
		if err := eps[p].Isend(0, 5, []byte{'a' + byte(p)}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The sends completed eagerly; the messages are queued at rank 0.
	eps[0].Retire(5)
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(got, func(a, b stray) int { return a.from - b.from })
	want := []stray{{1, 5, "b"}, {2, 5, "c"}}
	if !slices.Equal(got, want) {
		t.Fatalf("strays %v, want %v", got, want)
	}
}

// TestErrorNamesJobRank: a failed receive over the local route names the
// peer's job rank, and a failed one still pending when Wait's ctx ends
// gives ctx's error.
func TestErrorNamesJobRank(t *testing.T) {
	eps := routed(t, 4, memLocal)
	defer closeAll(eps)
	r := eps[2].Irecv(0, 1, make([]byte, 4)) // 0 is local rank 1 of host [2 0]
	short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := r.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with an ended ctx: %v", err)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("pending request's Err: %v", err)
	}
	eps[0].Close()
	err := r.Wait(ctxFor(t))
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 0 || !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("recv from closed job rank 0: %v, want a PeerError for peer 0 wrapping ErrPeerClosed", err)
	}
	if !errors.As(r.Err(), &pe) || pe.Peer != 0 {
		t.Fatalf("Err: %v", r.Err())
	}
}

func TestNewChecks(t *testing.T) {
	m2, m4 := mem.New(2), mem.New(4)
	defer closeAll2(m2, m4)
	for _, tc := range []struct {
		name       string
		rank, size int
		routes     []route.Route
		want       string
	}{
		{"rank out of range", 4, 4, []route.Route{{Endpoint: m4[0]}}, "rank 4 of a job of size 4"},
		{"no endpoint", 0, 4, []route.Route{{Name: "shm"}}, "shm has no endpoint"},
		{"unreached", 0, 4, []route.Route{{Name: "shm", Endpoint: m2[0], Ranks: []int{0, 1}}}, "no route reaches job ranks [2 3]"},
		{"wrong size", 0, 4, []route.Route{{Name: "shm", Endpoint: m2[0], Ranks: []int{0, 1, 2}}}, "rank 0 of 2"},
		{"not me", 0, 4, []route.Route{{Name: "shm", Endpoint: m2[0], Ranks: []int{1, 0}}}, "does not make it job rank 0"},
		{"twice", 0, 4, []route.Route{{Name: "shm", Endpoint: m2[0], Ranks: []int{0, 0}}}, "job rank 0 twice"},
		{"out of range", 0, 4, []route.Route{{Name: "shm", Endpoint: m2[0], Ranks: []int{0, 9}}}, "job rank 9 twice or out of range"},
		{"whole job, wrong size", 0, 2, []route.Route{{Name: "tcp", Endpoint: m4[0]}}, "rank 0 of 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := route.New(tc.rank, tc.size, tc.routes...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// closer counts its Close calls.
type closer struct {
	transport.Endpoint
	n   int
	err error
}

func (c *closer) Close() error { c.n++; c.Endpoint.Close(); return c.err }

func TestCloseAll(t *testing.T) {
	boom := errors.New("boom")
	a, b := &closer{Endpoint: mem.New(1)[0]}, &closer{Endpoint: mem.New(1)[0], err: boom}
	ep, err := route.New(0, 1, route.Route{Name: "a", Endpoint: a}, route.Route{Name: "b", Endpoint: b})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ep.Close(); !errors.Is(err, boom) || !strings.Contains(err.Error(), "route b") {
			t.Fatalf("Close: %v, want route b's error", err)
		}
	}
	if a.n != 1 || b.n != 1 {
		t.Fatalf("routes closed %d and %d times, want once each", a.n, b.n)
	}
	if err := ep.Isend(0, 1, nil).Wait(ctxFor(t)); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("send after Close: %v", err)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func closeAll(eps []*route.Endpoint) {
	for _, ep := range eps {
		ep.Close()
	}
}

func closeAll2(ms ...[]transport.Endpoint) {
	for _, m := range ms {
		for _, ep := range m {
			ep.Close()
		}
	}
}

// segHinted is a local route's endpoint that asks for segments of 1 MiB to
// every peer but one of its own ranks, local rank 1's.
type segHinted struct{ transport.Endpoint }

func (s segHinted) SegmentBytes(peer int) int {
	if peer == 1 {
		return 0
	}
	return 1 << 20
}

// TestSegmentBytes: the router answers with the endpoint of the peer's
// route, asked with the peer's rank there; a route whose endpoint has no
// hint, or a rank out of range, gets 0.
func TestSegmentBytes(t *testing.T) {
	local := mem.New(3)
	all := mem.New(4)
	ep, err := route.New(0, 4,
		route.Route{Name: "local", Endpoint: segHinted{local[0]}, Ranks: []int{0, 2, 3}},
		route.Route{Name: "net", Endpoint: all[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	for peer, want := range map[int]int{1: 0, 2: 0, 3: 1 << 20, 4: 0, -1: 0} {
		if got := ep.SegmentBytes(peer); got != want {
			t.Errorf("SegmentBytes(%d) = %d, want %d (job rank 2 is local rank 1, 1 goes by net)", peer, got, want)
		}
	}
}
