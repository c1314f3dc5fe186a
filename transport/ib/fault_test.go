package ib_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
)

// losses records the peers each rank's OnPeerLoss reported.
type losses struct {
	mu   sync.Mutex
	seen map[int][]*transport.PeerError // rank -> reports
	ch   chan struct{}
}

func watch(eps []*ib.Endpoint) *losses {
	l := &losses{seen: map[int][]*transport.PeerError{}, ch: make(chan struct{}, 100)}
	for r, ep := range eps {
		ep.OnPeerLoss(func(pe *transport.PeerError) {
			l.mu.Lock()
			l.seen[r] = append(l.seen[r], pe)
			l.mu.Unlock()
			l.ch <- struct{}{}
		})
	}
	return l
}

// await waits until rank has reported the loss of peer.
func (l *losses) await(t *testing.T, ctx context.Context, rank, peer int) *transport.PeerError {
	t.Helper()
	for {
		l.mu.Lock()
		for _, pe := range l.seen[rank] {
			if pe.Peer == peer {
				l.mu.Unlock()
				return pe
			}
		}
		l.mu.Unlock()
		select {
		case <-l.ch:
		case <-ctx.Done():
			t.Fatalf("rank %d never reported the loss of peer %d (reports: %v)", rank, peer, l.peers(rank))
		}
	}
}

func (l *losses) peers(rank int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ps []int
	for _, pe := range l.seen[rank] {
		ps = append(ps, pe.Peer)
	}
	return ps
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func closeAll(t *testing.T, eps []*ib.Endpoint) {
	t.Cleanup(func() {
		for _, ep := range eps {
			ep.Close()
		}
	})
}

// wantLinkErr checks that err is a PeerError naming peer, wrapping
// ErrPeerClosed and a CompletionError.
func wantLinkErr(t *testing.T, what string, err error, peer int) {
	t.Helper()
	var pe *transport.PeerError
	var ce *ib.CompletionError
	if !errors.As(err, &pe) || pe.Peer != peer || !errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &ce) {
		t.Fatalf("%s: %v, want a PeerError for peer %d wrapping ErrPeerClosed and a CompletionError", what, err, peer)
	}
}

// ring runs a ring exchange (each rank sends to the next, receives from the
// previous, small and large messages in turn) until it fails, counting the
// rounds rank 0 finishes; it returns each rank's error.
func ring(ctx context.Context, eps []*ib.Endpoint, rounds *atomic.Int64) []error {
	n := len(eps)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				size := 100
				if i%2 == 1 {
					size = 300 << 10
				}
				out := bytes.Repeat([]byte{byte(r + i)}, size)
				in := make([]byte, size)
				s := ep.Isend((r+1)%n, transport.Tag(i), out)
				rv := ep.Irecv((r+n-1)%n, transport.Tag(i), in)
				if err := rv.Wait(ctx); err != nil {
					errs[r] = err
					return
				}
				if err := s.Wait(ctx); err != nil {
					errs[r] = err
					return
				}
				if in[0] != byte((r+n-1)%n+i) {
					errs[r] = fmt.Errorf("round %d: corrupt", i)
					return
				}
				if r == 0 {
					rounds.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// TestQPErrorMidCollective moves rank 1's queue pair to rank 2 into the
// error state in the middle of a ring exchange: rank 1 must name rank 2,
// rank 2 must name rank 1 (its next work request towards the broken queue
// pair fails), and rank 0, whose links are fine, must name nobody.
func TestQPErrorMidCollective(t *testing.T) {
	ctx := testCtx(t)
	f := ibfake.New()
	eps := connect(t, f, 3, func(c *ib.Config) { c.Heartbeat = 5 * time.Millisecond })
	closeAll(t, eps)
	l := watch(eps)
	var rounds atomic.Int64
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan []error, 1)
	go func() { done <- ring(rctx, eps, &rounds) }()
	for rounds.Load() < 10 {
		time.Sleep(time.Millisecond)
	}
	f.Device(devName(1)).QPTo(devName(2)).Break()

	pe := l.await(t, ctx, 1, 2)
	wantLinkErr(t, "rank 1's report", pe, 2)
	pe = l.await(t, ctx, 2, 1)
	wantLinkErr(t, "rank 2's report", pe, 1)
	// Rank 2's receive from 1 fails naming 1; rank 1's send to 2 fails
	// naming 2 (or its receive from 0 goes on until rank 0 stalls).
	stop()
	errs := <-done
	if errs[2] != nil && !errors.Is(errs[2], context.Canceled) {
		wantLinkErr(t, "rank 2's ring", errs[2], 1)
	}
	if ps := l.peers(0); len(ps) != 0 {
		t.Fatalf("rank 0 reported losses %v; its links are fine", ps)
	}
	// The surviving link still carries messages, both ways.
	for _, pair := range [][2]int{{0, 1}, {1, 0}, {0, 2}, {2, 0}} {
		got := make([]byte, 5)
		r := eps[pair[1]].Irecv(pair[0], 99999, got)
		if err := eps[pair[0]].Isend(pair[1], 99999, []byte("alive")).Wait(ctx); err != nil {
			t.Fatalf("%d -> %d after the break: %v", pair[0], pair[1], err)
		}
		if err := r.Wait(ctx); err != nil || string(got) != "alive" {
			t.Fatalf("%d -> %d after the break: %v %q", pair[0], pair[1], err, got)
		}
	}
	// A send to the lost peer fails at once, naming it.
	wantLinkErr(t, "send after loss", eps[1].Isend(2, 1, []byte("x")).Wait(ctx), 2)
}

// TestInjectedErrorCompletion makes one send complete with a remote access
// error: the send fails naming the peer and the loss is reported.
func TestInjectedErrorCompletion(t *testing.T) {
	ctx := testCtx(t)
	f := ibfake.New()
	eps := connect(t, f, 2, func(c *ib.Config) { c.Heartbeat = 5 * time.Millisecond })
	closeAll(t, eps)
	l := watch(eps)
	pending := eps[0].Irecv(1, 7, make([]byte, 4))
	f.Device(devName(0)).QPTo(devName(1)).FailNext(ib.StatusRemAccessErr)
	big := make([]byte, 1<<20) // rendezvous: the announcement is what fails
	err := eps[0].Isend(1, 3, big).Wait(ctx)
	wantLinkErr(t, "send", err, 1)
	var ce *ib.CompletionError
	if errors.As(err, &ce); ce.Status != ib.StatusRemAccessErr {
		t.Fatalf("status %v, want %v", ce.Status, ib.StatusRemAccessErr)
	}
	wantLinkErr(t, "report", l.await(t, ctx, 0, 1), 1)
	wantLinkErr(t, "pending receive", pending.Wait(ctx), 1)
	wantLinkErr(t, "rank 1's report", l.await(t, ctx, 1, 0), 0)
}

// TestVanishedPeer crashes rank 2's device while nothing flows: the
// heartbeats find out, and ranks 0 and 1 name rank 2.
func TestVanishedPeer(t *testing.T) {
	ctx := testCtx(t)
	f := ibfake.New()
	eps := connect(t, f, 3, func(c *ib.Config) { c.Heartbeat = 5 * time.Millisecond })
	closeAll(t, eps)
	l := watch(eps)
	r := eps[0].Irecv(2, 1, make([]byte, 10))
	f.Device(devName(2)).Crash()
	for _, rank := range []int{0, 1} {
		pe := l.await(t, ctx, rank, 2)
		wantLinkErr(t, fmt.Sprintf("rank %d", rank), pe, 2)
		var ce *ib.CompletionError
		if errors.As(pe, &ce); ce.Status != ib.StatusRetryExceeded {
			t.Fatalf("rank %d: status %v, want %v", rank, ce.Status, ib.StatusRetryExceeded)
		}
	}
	wantLinkErr(t, "pending receive from the vanished rank", r.Wait(ctx), 2)
	got := make([]byte, 2)
	rr := eps[1].Irecv(0, 1, got)
	if err := eps[0].Isend(1, 1, []byte("ok")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rr.Wait(ctx); err != nil || string(got) != "ok" {
		t.Fatalf("0 -> 1 after 2 vanished: %v %q", err, got)
	}
}

// TestGoodbyeIsNotALoss: a peer that closes says goodbye; receives from
// it fail with ErrPeerClosed but no loss is reported.
func TestGoodbyeIsNotALoss(t *testing.T) {
	ctx := testCtx(t)
	eps := connect(t, ibfake.New(), 2, func(c *ib.Config) { c.Heartbeat = 5 * time.Millisecond })
	closeAll(t, eps)
	l := watch(eps)
	r := eps[1].Irecv(0, 1, make([]byte, 3))
	eps[0].Close()
	err := r.Wait(ctx)
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &pe) || pe.Peer != 0 {
		t.Fatalf("receive from a closed peer: %v", err)
	}
	time.Sleep(30 * time.Millisecond) // several heartbeats
	if ps := l.peers(1); len(ps) != 0 {
		t.Fatalf("rank 1 reported losses %v after a goodbye", ps)
	}
}

// TestCreditsBothWays floods each direction with more eager messages than
// there are receive slots, with no receive posted until the sends are done:
// the receivers' progress goroutines move them to the unexpected queue and
// return credits, so nothing is overrun (the fake fails a send that finds
// no posted receive) and nothing deadlocks.
func TestCreditsBothWays(t *testing.T) {
	ctx := testCtx(t)
	eps := connect(t, ibfake.New(), 2, func(c *ib.Config) { c.RecvDepth, c.SlotSize = 4, 512 })
	closeAll(t, eps)
	const msgs = 500
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			var reqs []transport.Request
			for i := range msgs {
				reqs = append(reqs, eps[r].Isend(1-r, 5, []byte(fmt.Sprintf("%d:%d", r, i))))
			}
			for i, q := range reqs {
				if err := q.Wait(ctx); err != nil {
					t.Errorf("rank %d send %d: %v", r, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for r := range 2 {
		for i := range msgs {
			want := fmt.Sprintf("%d:%d", 1-r, i)
			got := make([]byte, len(want))
			if err := eps[r].Irecv(1-r, 5, got).Wait(ctx); err != nil || string(got) != want {
				t.Fatalf("rank %d message %d: %v %q, want %q", r, i, err, got, want)
			}
		}
	}
}

// tamperKV corrupts one rank's published queue pair entry.
type tamperKV struct {
	*testutil.KV
	key string
}

func (k *tamperKV) Set(ctx context.Context, key string, value []byte) error {
	if key == k.key {
		value = append([]byte(nil), value...)
		value[20] ^= 1 // inside the queue pair number
	}
	return k.KV.Set(ctx, key, value)
}

// TestHandshake: an entry that does not carry the right MAC (another
// secret, or tampered with in the store) fails Connect, naming the peer.
func TestHandshake(t *testing.T) {
	for _, tc := range []struct {
		name    string
		secret1 string
		tamper  string
	}{
		{"wrong secret", "other", ""},
		{"tampered entry", "s3cret", "ib/qp/1/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			f := ibfake.New()
			kv := &tamperKV{KV: testutil.NewKV(), key: tc.tamper}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Go(func() {
					secret := "s3cret"
					if r == 1 {
						secret = tc.secret1
					}
					ep, err := ib.Connect(ctx, ib.Config{Rank: r, Size: 2, JobID: "job", KV: kv,
						Provider: f.Provider(), HCA: devName(r), Secret: []byte(secret)})
					if ep != nil {
						ep.Close()
					}
					errs[r] = err
				})
			}
			wg.Wait()
			checkFabric(t, f) // a failed Connect frees everything it made
			var pe *transport.PeerError
			if !errors.As(errs[0], &pe) || pe.Peer != 1 || pe.Op != "handshake" || !strings.Contains(errs[0].Error(), "authentication failed") {
				t.Fatalf("rank 0: %v, want a handshake PeerError naming rank 1", errs[0])
			}
			if errs[1] == nil {
				t.Fatal("rank 1 connected although rank 0 refused it")
			}
		})
	}
}

// TestQueuePairSettings checks what Connect writes into the queue pairs:
// the remote queue pair, the path MTU from the port, and the retry
// options.
func TestQueuePairSettings(t *testing.T) {
	f := ibfake.New()
	f.SetMTU(devName(1), 3) // 1024 bytes: the path MTU of both ends
	eps := connect(t, f, 2, func(c *ib.Config) { c.Timeout, c.RetryCount, c.RNRRetry = 10, 3, 5 })
	closeAll(t, eps)
	q0, q1 := f.Device(devName(0)).QPTo(devName(1)), f.Device(devName(1)).QPTo(devName(0))
	rtr, rts := q0.RTR(), q0.RTS()
	if rtr.RemoteQPN != q1.Num() || rtr.MTU != 3 || q1.RTR().MTU != 3 || rtr.RemotePSN != q1.RTS().PSN {
		t.Fatalf("RTR %+v: want remote QPN %#x, MTU 3 (1024) at both ends, remote PSN %#x", rtr, q1.Num(), q1.RTS().PSN)
	}
	if rts.Timeout != 10 || rts.RetryCnt != 3 || rts.RNRRetry != 5 || rts.PSN > 0xffffff {
		t.Fatalf("RTS %+v: want timeout 10, retry 3, RNR retry 5, a 24-bit PSN", rts)
	}
}

// TestIdleParks: an idle endpoint stops polling after its spin and parks
// on the completion channel, and a message wakes it. Over 100 ms idle a
// parked pair polls a handful of times (spin, arm, poll once more);
// spinning all along would poll tens of thousands of times. The bound,
// 1000 polls, sits far from both.
func TestIdleParks(t *testing.T) {
	ctx := testCtx(t)
	f := ibfake.New()
	eps := connect(t, f, 2, func(c *ib.Config) { c.Heartbeat, c.Spin = -1, time.Millisecond })
	closeAll(t, eps)
	time.Sleep(20 * time.Millisecond) // past the spin after Connect
	before := f.Polls()
	time.Sleep(100 * time.Millisecond)
	if n := f.Polls() - before; n > 1000 {
		t.Fatalf("%d polls while idle for 100 ms: the progress goroutine does not park", n)
	}
	got := make([]byte, 4)
	r := eps[1].Irecv(0, 1, got)
	if err := eps[0].Isend(1, 1, []byte("wake")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil || string(got) != "wake" {
		t.Fatalf("after parking: %v %q", err, got)
	}
}

// TestEnvironment: GOCCL_IB_HCA names the device and port when
// Config.HCA is empty, and bad values are refused before anything opens.
func TestEnvironment(t *testing.T) {
	ctx := testCtx(t)
	f := ibfake.New()
	t.Setenv(ib.EnvHCA, "envdev")
	ep, err := ib.Connect(ctx, ib.Config{Rank: 0, Size: 1, Provider: f.Provider()})
	if err != nil {
		t.Fatal(err)
	}
	if f.Device("envdev") == nil {
		t.Fatalf("GOCCL_IB_HCA=envdev: device not opened")
	}
	ep.Close()
	for _, tc := range []struct{ hca, gid string }{{"envdev:2", ""}, {"envdev:x", ""}, {"envdev", "-1"}, {"envdev", "one"}} {
		t.Setenv(ib.EnvHCA, tc.hca)
		t.Setenv(ib.EnvGIDIndex, tc.gid)
		if ep, err := ib.Connect(ctx, ib.Config{Rank: 0, Size: 1, Provider: f.Provider()}); err == nil {
			ep.Close()
			t.Errorf("GOCCL_IB_HCA=%q GOCCL_IB_GID_INDEX=%q: Connect succeeded", tc.hca, tc.gid)
		}
	}
	checkFabric(t, f)
}

// TestReadError: the receiver's RDMA READ completes with an error; the
// receiver names the sender and its receive fails, and the sender, whose
// send waits for the end of the read, learns of the loss by its next
// request (a heartbeat) and names the receiver.
func TestReadError(t *testing.T) {
	ctx := testCtx(t)
	f := ibfake.New()
	eps := connect(t, f, 2, func(c *ib.Config) { c.RendezvousRead, c.Heartbeat = true, 5*time.Millisecond })
	closeAll(t, eps)
	l := watch(eps)
	f.Device(devName(1)).QPTo(devName(0)).FailNext(ib.StatusRemAccessErr)
	r := eps[1].Irecv(0, 1, make([]byte, 1<<20))
	s := eps[0].Isend(1, 1, make([]byte, 1<<20))
	wantLinkErr(t, "receive", r.Wait(ctx), 0)
	wantLinkErr(t, "rank 1's report", l.await(t, ctx, 1, 0), 0)
	wantLinkErr(t, "send", s.Wait(ctx), 1)
	wantLinkErr(t, "rank 0's report", l.await(t, ctx, 0, 1), 1)
}
