package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestConformanceYield: the waits of a host with more ranks than cores,
// which poll for long and give the core away between polls.
func TestConformanceYield(t *testing.T) {
	transporttest.Run(t, meshFunc(tcp.Config{Spin: 10 * time.Millisecond, Yield: true}))
}

func TestConformanceLazy(t *testing.T) {
	transporttest.Run(t, meshFunc(tcp.Config{Lazy: true}))
}

// links lists the peers ep holds a link to.
func links(ep transport.Endpoint) []int {
	var out []int
	for q := range ep.Size() {
		if ep.(transport.Linker).Linked(q) {
			out = append(out, q)
		}
	}
	return out
}

// exchange sends a message from a to b and from b to a at once and checks
// both arrive.
func exchange(t *testing.T, ctx context.Context, eps []transport.Endpoint, a, b int, tag transport.Tag) {
	t.Helper()
	msg := func(from, to int) []byte { return fmt.Appendf(nil, "%d->%d tag %d", from, to, tag) }
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, pair := range [][2]int{{a, b}, {b, a}} {
		wg.Go(func() {
			from, to := pair[0], pair[1]
			s := eps[from].Isend(to, tag, msg(from, to))
			want := msg(to, from)
			got := make([]byte, len(want))
			r := eps[from].Irecv(to, tag, got)
			if err := s.Wait(ctx); err != nil {
				errs[i] = fmt.Errorf("send %d->%d: %w", from, to, err)
				return
			}
			if err := r.Wait(ctx); err != nil {
				errs[i] = fmt.Errorf("recv %d<-%d: %w", from, to, err)
				return
			}
			if !bytes.Equal(got, want) {
				errs[i] = fmt.Errorf("rank %d got %q from %d, want %q", from, got, to, want)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// Connect links only the ring neighbours; a recursive-doubling exchange
// adds its log2(N) partners and no one else.
func TestLazyLinksOnlyWhatIsUsed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 8
	eps, err := connectAll(ctx, n, tcp.Config{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(eps)
	for r, ep := range eps {
		want := []int{(r + 1) % n, (r + n - 1) % n}
		if got := links(ep); len(got) != 2 || !contains(got, want[0]) || !contains(got, want[1]) {
			t.Errorf("rank %d after Connect: links to %v, want the ring neighbours %v", r, got, want)
		}
	}
	for d := 1; d < n; d *= 2 {
		var wg sync.WaitGroup
		for r := range n {
			if r < r^d {
				wg.Go(func() { exchange(t, ctx, eps, r, r^d, transport.Tag(d)) })
			}
		}
		wg.Wait()
	}
	for r, ep := range eps {
		allowed := map[int]bool{(r + 1) % n: true, (r + n - 1) % n: true}
		for d := 1; d < n; d *= 2 {
			allowed[r^d] = true
		}
		for _, q := range links(ep) {
			if !allowed[q] {
				t.Errorf("rank %d holds a link to %d, which it never talked to", r, q)
			}
		}
		if got := len(links(ep)); got > 2+3 {
			t.Errorf("rank %d holds %d links, want at most 5", r, got)
		}
	}
}

// Both ends of a pair dial at once, many times over: exactly one link
// comes up and messages cross it both ways.
func TestLazySimultaneousDial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 6
	for round := range 10 {
		eps, err := connectAll(ctx, n, tcp.Config{Lazy: true, Secret: []byte("s3cret")})
		if err != nil {
			t.Fatal(err)
		}
		// Every pair that is not ring neighbours, all at once, both ways.
		var wg sync.WaitGroup
		for a := range n {
			for b := a + 2; b < n; b++ {
				if a == 0 && b == n-1 {
					continue
				}
				wg.Go(func() { exchange(t, ctx, eps, a, b, transport.Tag(round)) })
			}
		}
		wg.Wait()
		for r, ep := range eps {
			if got := len(links(ep)); got != n-1 {
				t.Errorf("round %d: rank %d holds %d links, want %d", round, r, got, n-1)
			}
		}
		// And the links still carry traffic after the race.
		exchange(t, ctx, eps, 0, 3, 1000)
		closeAll(eps)
	}
}

// A peer that is gone when it is first needed is an error naming it.
func TestLazyUnreachablePeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 5
	eps, err := connectAll(ctx, n, tcp.Config{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(eps)
	lost := make(chan *transport.PeerError, 1)
	eps[0].(transport.PeerLossNotifier).OnPeerLoss(func(pe *transport.PeerError) {
		select {
		case lost <- pe:
		default:
		}
	})
	eps[2].Close()
	recv := eps[0].Irecv(2, 7, make([]byte, 1))
	err = eps[0].Isend(2, 7, []byte("x")).Wait(ctx)
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 2 || !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("send to a closed peer: %v, want a PeerError naming rank 2 wrapping ErrPeerClosed", err)
	}
	if err := recv.Wait(ctx); !errors.As(err, &pe) || pe.Peer != 2 {
		t.Errorf("receive posted from the lost peer: %v, want a PeerError naming rank 2", err)
	}
	select {
	case pe := <-lost:
		if pe.Peer != 2 {
			t.Errorf("OnPeerLoss named rank %d, want 2", pe.Peer)
		}
	case <-ctx.Done():
		t.Error("OnPeerLoss never heard of rank 2")
	}
	// Later sends fail at once, as after a broken link.
	if err := eps[0].Isend(2, 8, nil).Wait(ctx); !errors.As(err, &pe) || pe.Peer != 2 {
		t.Errorf("second send: %v", err)
	}
}

// A stranger with the wrong secret cannot make a link on demand either.
func TestLazyWrongSecretRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := testutil.NewKV()
	job := fmt.Sprintf("job-%d", jobSeq.Add(1))
	eps, err := connectAll(ctx, 3, tcp.Config{Lazy: true, Secret: []byte("right"), KV: kv, JobID: job})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(eps)
	// An impostor claims rank 1 of the job with another secret and dials
	// rank 2 (which it may: links are lazy) through rank 2's address.
	addr, err := kv.Get(ctx, tcp.AddrKey(2))
	if err != nil {
		t.Fatal(err)
	}
	ikv := testutil.NewKV()
	ikv.Set(ctx, tcp.AddrKey(2), addr)
	ikv.Set(ctx, tcp.AddrKey(0), []byte("127.0.0.1:1")) // nobody
	ictx, icancel := context.WithTimeout(ctx, 3*time.Second)
	defer icancel()
	imp, err := tcp.Connect(ictx, tcp.Config{Rank: 1, Size: 3, JobID: job, KV: ikv, Lazy: true,
		Secret: []byte("wrong"), ListenHost: "127.0.0.1", Logger: quiet, InitTimeout: 3 * time.Second})
	if err == nil {
		imp.Close()
		t.Fatal("an impostor with the wrong secret linked to the job")
	}
	exchange(t, ctx, eps, 1, 2, 5)
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func closeAll(eps []transport.Endpoint) {
	for _, ep := range eps {
		ep.Close()
	}
}

// Links made on demand run the same TLS and HMAC handshake.
func TestConformanceLazyTLS(t *testing.T) {
	cert, key := writeCert(t, "job")
	cfg, err := tcp.TLSFromFiles(cert, key, cert)
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Run(t, meshFunc(tcp.Config{TLS: cfg, Secret: []byte("s"), Lazy: true}))
}

// An idle link holds no read buffer: none before its first message, and
// none once every byte that came has been handed out, however big the
// messages were. (A waiter that polls holds one for the length of its
// poll; the buffers are counted, not timed.)
func TestIdleLinksHoldNoReadBuffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 4
	eps, err := connectAll(ctx, n, tcp.Config{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(eps)
	for r, ep := range eps {
		if held := tcp.ReadBuffersHeld(ep); held != 0 {
			t.Errorf("rank %d after Connect, before any message: %d read buffers held", r, held)
		}
	}
	small, big := []byte("hello"), bytes.Repeat([]byte{7}, 3<<20)
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range n {
			wg.Go(func() {
				to, from := (r+1)%n, (r+n-1)%n
				for i, msg := range [][]byte{small, big, small} {
					tag := transport.Tag(10*round + i)
					s := eps[r].Isend(to, tag, msg)
					got := make([]byte, len(msg))
					if err := eps[r].Irecv(from, tag, got).Wait(ctx); err != nil {
						errs[r] = err
						return
					}
					if err := s.Wait(ctx); err != nil {
						errs[r] = err
						return
					}
					if !bytes.Equal(got, msg) {
						errs[r] = fmt.Errorf("rank %d: message %d from %d corrupted", r, i, from)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		// Every message was received: each buffer was emptied by the read
		// that took its last byte, which gave it back.
		for r, ep := range eps {
			if held := tcp.ReadBuffersHeld(ep); held != 0 {
				t.Errorf("round %d: rank %d holds %d read buffers with every message received", round, r, held)
			}
		}
	}
}
