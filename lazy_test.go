package goccl

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
)

// linkedPeers lists the world ranks c's endpoint holds a link to.
func linkedPeers(c *Comm) []int {
	lk := c.shared.counts.Endpoint.(transport.Linker)
	var out []int
	for q := range c.shared.ep.Size() {
		if lk.Linked(q) {
			out = append(out, q)
		}
	}
	return out
}

// An allreduce-only job with lazy links holds O(log N) links per rank:
// Init's ring neighbours and the partners of the barrier and of the
// algorithms the calls ran, not N-1.
func TestLazyAllReduceJobHoldsLogNLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("16 ranks over TCP")
	}
	const n = 16
	comms, err := initRanks(t, n, "tcp", WithConnect("lazy"))
	if err != nil {
		t.Fatal(err)
	}
	for r, c := range comms {
		// Init links the ring neighbours and the partners of its address
		// exchange, r±2^k (init_links.go).
		for _, q := range linkedPeers(c) {
			if d := min((q-r+n)%n, (r-q+n)%n); d&(d-1) != 0 {
				t.Errorf("rank %d after Init: a link to %d, not a ring neighbour or r±2^k", r, q)
			}
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range comms {
		wg.Go(func() {
			small := make([]float64, 1)
			for range 20 {
				small[0] = float64(r)
				if err := c.AllReduce(ctx, small, reduceop.Sum); err != nil {
					errs[r] = err
					return
				}
				if small[0] != n*(n-1)/2 {
					errs[r] = errors.New("wrong sum")
					return
				}
			}
			big := make([]float32, 1<<18) // 1 MiB
			for i := range big {
				big[i] = 1
			}
			if err := c.AllReduce(ctx, big, reduceop.Sum); err != nil {
				errs[r] = err
				return
			}
			if big[len(big)-1] != n {
				errs[r] = errors.New("wrong 1 MiB sum")
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, c := range comms {
		t.Logf("rank %d: links %v", r, linkedPeers(c))
	}
	limit := 2*bits.Len(n) + 2 // ring neighbours, partners of halving, doubling and trees
	for r, c := range comms {
		got := linkedPeers(c)
		if len(got) > limit || len(got) >= n-1 {
			t.Errorf("rank %d holds %d links %v; want O(log N): at most %d of %d peers", r, len(got), got, limit, n-1)
		}
	}
}

// A sub-communicator runs over its parent's endpoint: its calls reuse the
// links that exist and make the ones they need under the same rule.
func TestLazyGroupsShareLinks(t *testing.T) {
	const n = 16
	comms, err := initRanks(t, n, "tcp", WithConnect("lazy"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range comms {
		wg.Go(func() {
			g, err := c.Split(ctx, r%2, r)
			if err != nil {
				errs[r] = err
				return
			}
			defer g.Close()
			v := []int64{int64(r)}
			if err := g.AllReduce(ctx, v, reduceop.Sum); err != nil {
				errs[r] = err
				return
			}
			if want := int64(n*(n-2)/4 + r%2*n/2); v[0] != want {
				errs[r] = errors.New("wrong group sum")
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, c := range comms {
		if got := linkedPeers(c); len(got) == n-1 {
			t.Errorf("rank %d is linked to every peer %v", r, got)
		}
	}
}

func TestConnectSetting(t *testing.T) {
	if _, err := buildOptions([]Option{fakeEnv(map[string]string{"GOCCL_CONNECT": "sometimes"})}); !errors.Is(err, ErrInvalid) {
		t.Errorf("GOCCL_CONNECT=sometimes: %v, want ErrInvalid", err)
	}
	o, err := buildOptions([]Option{fakeEnv(map[string]string{"GOCCL_CONNECT": "lazy"})})
	if err != nil || o.connect != "lazy" {
		t.Errorf("GOCCL_CONNECT=lazy: %q, %v", o.connect, err)
	}
	o, err = buildOptions([]Option{fakeEnv(map[string]string{"GOCCL_CONNECT": "lazy"}), WithConnect("eager")})
	if err != nil || o.connect != "eager" {
		t.Errorf("WithConnect over the environment: %q, %v", o.connect, err)
	}
	if o, _ := buildOptions([]Option{fakeEnv(nil)}); o.connect != DefaultConnect {
		t.Errorf("default: %q, want %q", o.connect, DefaultConnect)
	}
}

// Links made after the store's host has closed find their peers without
// the store: Init shared every rank's address (init_links.go).
func TestLazyLinksOutliveTheStore(t *testing.T) {
	const n = 8
	comms, err := initRanks(t, n, "tcp", WithConnect("lazy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := comms[0].Close(); err != nil { // rank 0 hosts the store
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	members := []int{1, 2, 3, 4, 5, 6, 7}
	for r := 1; r < n; r++ {
		wg.Go(func() {
			g, err := comms[r].NewGroup(members)
			if err != nil {
				errs[r] = err
				return
			}
			// All to all: every pair of the group talks, most for the
			// first time.
			send := make([]int32, len(members))
			for i := range send {
				send[i] = int32(r)
			}
			recv := make([]int32, len(members))
			if err := g.AllToAll(ctx, send, recv); err != nil {
				errs[r] = err
				return
			}
			for i, v := range recv {
				if v != int32(members[i]) {
					errs[r] = fmt.Errorf("rank %d got %d from group rank %d", r, v, i)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := 1; r < n; r++ {
		if got := len(linkedPeers(comms[r])); got < n-2 {
			t.Errorf("rank %d holds %d links after an all-to-all of 7 ranks, want at least 6", r, got)
		}
	}
}

// Init under lazy links costs the store O(N) requests over the job: each
// rank greets the store (the client's first message, counted as a
// request), publishes its address, reads its right neighbour's and
// registers as alive; every other address travels between the ranks
// (init_links.go).
func TestLazyInitStoreRequests(t *testing.T) {
	for _, n := range []int{3, 5, 12, 33} {
		if testing.Short() && n > 12 {
			continue
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := store.NewServer(store.Options{})
			go srv.Serve(t.Context(), ln)
			defer srv.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			comms := make([]*Comm, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					comms[r], errs[r] = Init(ctx, fakeEnv(map[string]string{"GOCCL_EXTERNAL_STORE": "1"}),
						WithTransport("tcp"), WithConnect("lazy"), WithTimeout(30*time.Second),
						WithEnv(Env{Rank: r, Size: n, LocalRank: -1, LocalSize: -1, MasterAddr: "127.0.0.1", MasterPort: port, Source: "options"}))
					if errs[r] != nil {
						cancel()
					}
				})
			}
			wg.Wait()
			defer func() {
				for _, c := range comms {
					if c != nil {
						c.Close()
					}
				}
			}()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			got := srv.Requests()
			t.Logf("%d ranks: %d store requests (%.2f a rank)", n, got, float64(got)/float64(n))
			if got > int64(4*n) {
				t.Errorf("%d ranks: Init made %d store requests, want at most 4N = %d (greet, publish, right neighbour, alive)", n, got, 4*n)
			}
			for r, c := range comms {
				if b := c.shared.rdv.Book(); b != nil {
					for q := range n {
						if b.Known(q) == nil {
							t.Errorf("rank %d: no address for rank %d after Init", r, q)
						}
					}
				}
			}
		})
	}
}

// A rank posts an abort-notice receive only from the peers it holds a
// link to (abort_blame.go), not one per rank of the job; a link made after Init
// gets one too.
func TestLazyNoticesOnlyForLinks(t *testing.T) {
	const n = 16
	comms, err := initRanks(t, n, "tcp", WithConnect("lazy"))
	if err != nil {
		t.Fatal(err)
	}
	posted := func(c *Comm) map[int]bool {
		m := map[int]bool{}
		for _, q := range c.shared.notices.Posted() {
			m[q] = true
		}
		return m
	}
	limit := 2*bits.Len(n) + 2
	for r, c := range comms {
		p, linked := posted(c), linkedPeers(c)
		for q := range p {
			if !slices.Contains(linked, q) {
				t.Errorf("rank %d: a notice receive from %d, with no link to it", r, q)
			}
		}
		if len(p) > limit {
			t.Errorf("rank %d: %d notice receives posted, want at most %d (its links)", r, len(p), limit)
		}
	}
	// Rank 0 and rank n/2+1 were not linked: a message links them, and
	// each then listens to the other (the receiving side posts it from the
	// transport's goroutine, so wait for it, bounded).
	a, b := 0, n/2+1
	if slices.Contains(linkedPeers(comms[a]), b) {
		t.Fatalf("ranks %d and %d are linked after Init: pick another pair", a, b)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = comms[a].Send(ctx, []int32{1}, b, 0) })
	wg.Go(func() { errs[1] = comms[b].Recv(ctx, make([]int32, 1), a, 0) })
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]int{{a, b}, {b, a}} {
		for !posted(comms[pair[0]])[pair[1]] {
			if ctx.Err() != nil {
				t.Fatalf("rank %d: no notice receive from %d after their link came up", pair[0], pair[1])
			}
			time.Sleep(time.Millisecond)
		}
	}
}
