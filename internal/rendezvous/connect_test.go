//go:build linux

package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
)

// serveStore runs a store server (an in-memory table) on loopback for the
// test's duration and returns its address.
func serveStore(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := store.NewServer(store.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); srv.Close(); <-done })
	return ln.Addr().String()
}

// testCtx bounds a test's waits: a hang fails, it never blocks.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// meet runs the rendezvous of size ranks as goroutines, each with a store
// client of its own, and returns their rendezvous and endpoints.
func meet(t *testing.T, addr string, size int, kind string, cfg Config) ([]*Rendezvous, []transport.Endpoint, []int) {
	rdvs, eps, perHost, _ := meetCounted(t, addr, size, kind, cfg)
	return rdvs, eps, perHost
}

// requests counts a store client's requests.
type requests struct {
	store.Store
	n atomic.Int64
}

func (c *requests) Set(ctx context.Context, key string, v []byte) error {
	c.n.Add(1)
	return c.Store.Set(ctx, key, v)
}

func (c *requests) Get(ctx context.Context, key string) ([]byte, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *requests) Add(ctx context.Context, key string, d int64) (int64, error) {
	c.n.Add(1)
	return c.Store.Add(ctx, key, d)
}

func (c *requests) CompareSet(ctx context.Context, key string, old, new []byte) ([]byte, error) {
	c.n.Add(1)
	return c.Store.CompareSet(ctx, key, old, new)
}

// SetEphemeral passes on the client's alive keys (Settled).
func (c *requests) SetEphemeral(ctx context.Context, key string, v []byte) error {
	c.n.Add(1)
	return c.Store.(*store.Client).SetEphemeral(ctx, key, v)
}

// meetCounted is meet that also returns each rank's store requests.
func meetCounted(t *testing.T, addr string, size int, kind string, cfg Config) ([]*Rendezvous, []transport.Endpoint, []int, []int64) {
	t.Helper()
	ctx := testCtx(t)
	rdvs := make([]*Rendezvous, size)
	eps := make([]transport.Endpoint, size)
	perHost := make([]int, size)
	errs := make([]error, size)
	counts := make([]*requests, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			st, err := store.Dial(ctx, addr, store.Options{})
			if err != nil {
				errs[r] = err
				return
			}
			c := cfg
			c.JobRank, c.JobSize = r, size
			counts[r] = &requests{Store: st}
			rdvs[r] = New(counts[r], c)
			eps[r], perHost[r], errs[r] = rdvs[r].Connect(ctx, kind, r, size)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for r := range size {
			if eps[r] != nil {
				eps[r].Close()
			}
			if rdvs[r] != nil {
				rdvs[r].Release()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	n := make([]int64, size)
	for r, c := range counts {
		n[r] = c.n.Load()
	}
	return rdvs, eps, perHost, n
}

// TestConnectStoreRequests holds Connect to the design rule: no rank makes
// store requests in proportion to the job. Over H hosts of L=2 ranks,
// with lazy TCP between them, the N ranks make 11N+H+2 requests in all
// (the host group 5N+H+1, the blocks 4N+1, TCP's address publish and ring
// neighbour's read 2N), and none more than L+13 (a host's first arrival,
// which is also the job's last at both barriers).
func TestConnectStoreRequests(t *testing.T) {
	const l = 2
	for _, size := range []int{4, 8} {
		hosts := func(r int) string { return strconv.Itoa(r / l) }
		_, eps, _, n := meetCounted(t, serveStore(t), size, "auto",
			Config{JobID: "cost" + strconv.Itoa(size), Lazy: true, HostID: hosts})
		var total int64
		for r, c := range n {
			total += c
			if c > l+13 {
				t.Errorf("%d ranks: rank %d made %d store requests, want at most %d", size, r, c, l+13)
			}
		}
		if want := int64(11*size + size/l + 2); total != want {
			t.Errorf("%d ranks: %d store requests (%v), want 11N+H+2 = %d", size, total, n, want)
		}
		exchange(t, eps)
	}
}

// exchange sends a message from every rank to every other and checks
// what arrives.
func exchange(t *testing.T, eps []transport.Endpoint) {
	t.Helper()
	ctx := testCtx(t)
	n := len(eps)
	var reqs []transport.Request
	got := make([][][]byte, n)
	for r, ep := range eps {
		got[r] = make([][]byte, n)
		for p := range n {
			if p == r {
				continue
			}
			got[r][p] = make([]byte, 16)
			reqs = append(reqs, ep.Irecv(p, 7, got[r][p]))
			reqs = append(reqs, ep.Isend(p, 7, fmt.Appendf(nil, "%7d>%7d.", r, p)))
		}
	}
	for _, q := range reqs {
		if err := q.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for r := range n {
		for p := range n {
			if want := fmt.Sprintf("%7d>%7d.", p, r); p != r && string(got[r][p]) != want {
				t.Errorf("rank %d got %q from %d, want %q", r, got[r][p], p, want)
			}
		}
	}
}

// TestConnect: ranks as goroutines meet over a store server and connect
// shared memory within their (pretend) hosts and TCP between them; the
// transport to each peer, the ranks a host and the messages are right.
func TestConnect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    string
		hosts   []string
		lazy    bool
		perHost int
	}{
		{"auto one host", "auto", []string{"a", "a", "a"}, false, 3},
		{"auto two hosts", "auto", []string{"a", "a", "b", "b"}, false, 2},
		{"auto interleaved, lazy", "", []string{"a", "b", "a", "b"}, true, 1},
		{"auto uneven", "auto", []string{"a", "a", "a", "b"}, false, 1},
		{"tcp", "tcp", []string{"a", "a", "a", "a"}, false, 1},
		{"tcp lazy", "tcp", []string{"a", "a", "a", "a"}, true, 1},
		{"shm", "shm", []string{"a", "a", "a", "a"}, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := len(tc.hosts)
			cfg := Config{JobID: "test-" + strings.ReplaceAll(t.Name(), "/", "."), Lazy: tc.lazy,
				HostID: func(r int) string { return tc.hosts[r] }}
			rdvs, eps, perHost := meet(t, serveStore(t), size, tc.kind, cfg)
			for r, ep := range eps {
				if perHost[r] != tc.perHost {
					t.Errorf("rank %d: %d ranks a host, want %d", r, perHost[r], tc.perHost)
				}
				for p := range size {
					want := "tcp"
					if tc.kind != "tcp" && tc.hosts[p] == tc.hosts[r] && strings.Count(strings.Join(tc.hosts, ""), tc.hosts[r]) > 1 {
						want = "shm"
					}
					if got := ep.(interface{ Via(int) string }).Via(p); got != want {
						t.Errorf("rank %d to %d: %s, want %s", r, p, got, want)
					}
				}
				if lazyTCP := tc.lazy && slices.Contains(tc.hosts, "b") || tc.kind == "tcp" && tc.lazy; lazyTCP != (rdvs[r].Book() != nil) {
					t.Errorf("rank %d: address book %v", r, rdvs[r].Book())
				}
			}
			exchange(t, eps)
		})
	}
}

// TestConnectShmOtherHost: transport shm across hosts fails on every rank,
// naming the ranks it cannot reach.
func TestConnectShmOtherHost(t *testing.T) {
	addr := serveStore(t)
	hosts := []string{"a", "a", "b"}
	ctx := testCtx(t)
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for r := range hosts {
		wg.Go(func() {
			st, err := store.Dial(ctx, addr, store.Options{})
			if err != nil {
				errs[r] = err
				return
			}
			rdv := New(st, Config{JobID: "shm-other", JobRank: r, JobSize: len(hosts), HostID: func(r int) string { return hosts[r] }})
			defer rdv.Release()
			ep, _, err := rdv.Connect(ctx, "shm", r, len(hosts))
			if err == nil {
				ep.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, want := range []string{"ranks [2] are not", "ranks [2] are not", "ranks [0 1] are not"} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), want) {
			t.Errorf("rank %d: %v, want an error with %q", r, errs[r], want)
		}
	}
}

// TestShrinkEpoch walks the store side of Shrink: three ranks meet and
// say they are alive; rank 2 dies (its store connection closes, and the
// store drops its alive key); the survivors register in the next shrink
// epoch, blaming it, agree on who is in whatever each proposes, connect
// under the epoch's keys, and say so.
func TestShrinkEpoch(t *testing.T) {
	addr := serveStore(t)
	ctx := testCtx(t)
	rdvs, eps, _ := meet(t, addr, 3, "tcp", Config{JobID: "shrink"})
	for _, r := range rdvs {
		if err := r.Settled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if tracks, err := rdvs[0].TracksAlive(ctx); err != nil || !tracks {
		t.Fatalf("TracksAlive = %v, %v: the store server keeps alive keys", tracks, err)
	}
	eps[2].Close()
	rdvs[2].Store().Close() // rank 2 dies
	for {
		alive, err := rdvs[0].Alive(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("rank 2's alive key outlived its connection")
		case <-time.After(5 * time.Millisecond):
		}
	}

	next := []*Rendezvous{rdvs[0].Next(0, 1, nil), rdvs[1].Next(0, 1, nil)}
	defer next[0].Release()
	defer next[1].Release()
	for _, nr := range next {
		if err := nr.Round().Register(ctx, []int{2}); err != nil {
			t.Fatal(err)
		}
	}
	round := next[0].Round()
	if joined, err := round.Joined(ctx); err != nil || joined != 2 {
		t.Fatalf("Joined = %d, %v, want 2", joined, err)
	}
	var in []int
	for i := int64(1); i <= 2; i++ {
		jr, err := round.Registered(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, jr)
	}
	if slices.Sort(in); !slices.Equal(in, []int{0, 1}) {
		t.Errorf("registered %v, want [0 1]", in)
	}
	for jr, want := range []bool{false, false, true} {
		if got, err := round.Blamed(ctx, jr); err != nil || got != want {
			t.Errorf("Blamed(%d) = %v, %v, want %v", jr, got, err, want)
		}
	}
	// The first proposal wins.
	agreed0, err0 := next[0].Round().Propose(ctx, []int{0, 1})
	agreed1, err1 := next[1].Round().Propose(ctx, []int{1})
	if err := errors.Join(err0, err1); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(agreed0, []int{0, 1}) || !slices.Equal(agreed1, []int{0, 1}) {
		t.Fatalf("agreed %v and %v, want [0 1] both", agreed0, agreed1)
	}

	// Nobody has said a word: waiting, and not again while both live.
	if again, waiting, err := round.Status(ctx, agreed0, true); err != nil || again != "" || !waiting {
		t.Errorf("Status before any word: %q, %v, %v", again, waiting, err)
	}
	// The epoch connects under its own keys.
	seps := make([]transport.Endpoint, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, nr := range next {
		wg.Go(func() { seps[i], errs[i] = nr.ConnectTCP(ctx, i, 2) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer seps[0].Close()
	defer seps[1].Close()
	exchange(t, seps)
	if _, err := rdvs[0].Store().Get(ctx, "goccl/shrink/g0.s1//tcp/addr/1"); err != nil {
		t.Errorf("epoch address key: %v", err)
	}
	if err := next[0].Round().Say(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if again, waiting, err := round.Status(ctx, agreed0, true); err != nil || again != "" || !waiting {
		t.Errorf("Status after one word: %q, %v, %v", again, waiting, err)
	}
	if err := next[1].Round().Say(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if again, waiting, err := round.Status(ctx, agreed0, true); err != nil || again != "" || waiting {
		t.Errorf("Status after both words: %q, %v, %v", again, waiting, err)
	}

	// The next epoch: a member that failed, and one dead without a word,
	// make the round go again.
	e2 := next[0].Next(0, 2, nil)
	defer e2.Release()
	if err := e2.Round().Say(ctx, errors.New("no route")); err != nil {
		t.Fatal(err)
	}
	if again, _, err := e2.Round().Status(ctx, []int{0, 1}, true); err != nil || again != "job rank 0 failed: no route" {
		t.Errorf("Status with a failure: %q, %v", again, err)
	}
	if again, _, err := e2.Round().Status(ctx, []int{1, 2}, true); err != nil || again != "job rank 2 died" {
		t.Errorf("Status with a dead member: %q, %v", again, err)
	}
	if again, waiting, err := e2.Round().Status(ctx, []int{1, 2}, false); err != nil || again != "" || !waiting {
		t.Errorf("Status with a dead member, alive keys not kept: %q, %v, %v", again, waiting, err)
	}
}

// TestRejoin: a world of a new generation records it when settled, and a
// replacement process joins the one after.
func TestRejoin(t *testing.T) {
	addr := serveStore(t)
	ctx := testCtx(t)
	st, err := store.Dial(ctx, addr, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := New(st, Config{JobID: "rejoin", JobSize: 2})
	defer r.Release()
	if err := r.Rejoin(ctx); err != nil || r.Gen != 1 {
		t.Fatalf("Rejoin: generation %d, %v; want 1", r.Gen, err)
	}
	if err := r.Settled(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := r.Next(2, 0, nil)
	defer g2.Release()
	if err := g2.Settled(ctx); err != nil {
		t.Fatal(err)
	}
	late := r.Next(1, 0, nil) // a straggler of generation 1 does not go back
	defer late.Release()
	if err := late.Settled(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := st.Get(ctx, "goccl/rejoin/gen"); err != nil || string(v) != "2" {
		t.Errorf("gen = %q, %v, want 2", v, err)
	}
	n := New(st, Config{JobID: "rejoin", JobRank: 1, JobSize: 2})
	if err := n.Rejoin(ctx); err != nil || n.Gen != 3 {
		t.Errorf("Rejoin after generation 2: %d, %v; want 3", n.Gen, err)
	}
}
