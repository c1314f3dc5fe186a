package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// MeshFunc makes the endpoints of a job of size ranks; endpoint i must be
// rank i. Run closes every endpoint it gets.
type MeshFunc func(t *testing.T, size int) []transport.Endpoint

// Run runs the conformance suite against the transport that newMesh builds.
// Each subtest builds its own mesh. Run ends by checking that the
// transport's goroutines are gone once every endpoint is closed.
func Run(t *testing.T, newMesh MeshFunc) {
	before := runtime.NumGoroutine()
	tests := []struct {
		name string
		fn   func(t *testing.T, newMesh MeshFunc)
	}{
		{"RankSize", testRankSize},
		{"Ordering", testOrdering},
		{"IndependentTags", testIndependentTags},
		{"Self", testSelf},
		{"ZeroLength", testZeroLength},
		{"Large", testLarge},
		{"PostedBeforeAndAfter", testPostedBeforeAndAfter},
		{"Concurrent", testConcurrent},
		{"WrongLength", testWrongLength},
		{"CloseUnblocks", testCloseUnblocks},
		{"WaitDeadline", testWaitDeadline},
		{"PeerClosed", testPeerClosed},
		{"BadPeer", testBadPeer},
		{"Vectored", testVectored},
		{"VectoredWrongLength", testVectoredWrongLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newMesh) })
	}
	checkLeak(t, before)
}

// timeout bounds every wait of the suite: a hang fails, it never blocks CI.
const timeout = 20 * time.Second

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

func mesh(t *testing.T, newMesh MeshFunc, size int) []transport.Endpoint {
	eps := newMesh(t, size)
	if len(eps) != size {
		t.Fatalf("mesh of %d ranks has %d endpoints", size, len(eps))
	}
	t.Cleanup(func() {
		for _, ep := range eps {
			ep.Close()
		}
	})
	return eps
}

func pattern(n int, seed int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func wait(t *testing.T, ctx context.Context, what string, r transport.Request) {
	t.Helper()
	if err := r.Wait(ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func testRankSize(t *testing.T, newMesh MeshFunc) {
	for _, size := range []int{1, 2, 5} {
		eps := mesh(t, newMesh, size)
		for i, ep := range eps {
			if ep.Rank() != i || ep.Size() != size {
				t.Fatalf("endpoint %d: Rank()=%d Size()=%d, want %d, %d", i, ep.Rank(), ep.Size(), i, size)
			}
		}
	}
}

// testOrdering sends many messages of mixed sizes (small, and above common
// eager limits) on one (peer, tag); they must arrive in order.
func testOrdering(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	sizes := []int{1, 0, 100, 70 << 10, 3, 200 << 10, 17, 65536, 65537}
	const rounds = 4
	var sends []transport.Request
	var bufs [][]byte
	var recvs []transport.Request
	i := 0
	for range rounds {
		for _, n := range sizes {
			b := make([]byte, n)
			bufs = append(bufs, b)
			if i%2 == 0 { // half the receives posted first
				recvs = append(recvs, eps[1].Irecv(0, 7, b))
				sends = append(sends, eps[0].Isend(1, 7, pattern(n, i)))
			} else {
				sends = append(sends, eps[0].Isend(1, 7, pattern(n, i)))
				recvs = append(recvs, eps[1].Irecv(0, 7, b))
			}
			i++
		}
	}
	for i := range recvs {
		wait(t, ctx, fmt.Sprintf("recv %d", i), recvs[i])
		wait(t, ctx, fmt.Sprintf("send %d", i), sends[i])
		if !bytes.Equal(bufs[i], pattern(len(bufs[i]), i)) {
			t.Fatalf("message %d (%d bytes) out of order or corrupt", i, len(bufs[i]))
		}
	}
}

// testIndependentTags: a large message on one tag that nobody receives yet
// must not hold up a later message on another tag.
func testIndependentTags(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	big := pattern(1<<20, 1)
	sBig := eps[0].Isend(1, 1, big)
	sSmall := eps[0].Isend(1, 2, []byte("hi"))
	got := make([]byte, 2)
	wait(t, ctx, "recv tag 2", eps[1].Irecv(0, 2, got))
	wait(t, ctx, "send tag 2", sSmall)
	if string(got) != "hi" {
		t.Fatalf("tag 2: got %q", got)
	}
	gotBig := make([]byte, len(big))
	wait(t, ctx, "recv tag 1", eps[1].Irecv(0, 1, gotBig))
	wait(t, ctx, "send tag 1", sBig)
	if !bytes.Equal(gotBig, big) {
		t.Fatal("tag 1: payload differs")
	}
	// Receives on two tags posted in the opposite order of the sends.
	r1 := make([]byte, 3)
	r2 := make([]byte, 3)
	q2 := eps[0].Irecv(1, 20, r2)
	q1 := eps[0].Irecv(1, 10, r1)
	wait(t, ctx, "send 10", eps[1].Isend(0, 10, []byte("one")))
	wait(t, ctx, "send 20", eps[1].Isend(0, 20, []byte("two")))
	wait(t, ctx, "recv 10", q1)
	wait(t, ctx, "recv 20", q2)
	if string(r1) != "one" || string(r2) != "two" {
		t.Fatalf("got %q %q", r1, r2)
	}
}

func testSelf(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	for _, size := range []int{1, 3} {
		eps := mesh(t, newMesh, size)
		for _, n := range []int{0, 5, 1 << 20} {
			ep := eps[size-1]
			me := ep.Rank()
			// Send first, then receive.
			want := pattern(n, n)
			got := make([]byte, n)
			s := ep.Isend(me, 3, want)
			wait(t, ctx, "self recv", ep.Irecv(me, 3, got))
			wait(t, ctx, "self send", s)
			if !bytes.Equal(got, want) {
				t.Fatalf("size %d n %d: self message differs", size, n)
			}
			// Receive first.
			clear(got)
			r := ep.Irecv(me, 4, got)
			wait(t, ctx, "self send", ep.Isend(me, 4, want))
			wait(t, ctx, "self recv", r)
			if !bytes.Equal(got, want) {
				t.Fatalf("size %d n %d: self message (posted first) differs", size, n)
			}
		}
	}
}

func testZeroLength(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	for i := range 10 {
		var r, s transport.Request
		if i%2 == 0 {
			r = eps[1].Irecv(0, 0, nil)
			s = eps[0].Isend(1, 0, nil)
		} else {
			s = eps[0].Isend(1, 0, []byte{})
			r = eps[1].Irecv(0, 0, []byte{})
		}
		wait(t, ctx, "recv", r)
		wait(t, ctx, "send", s)
	}
	// A zero-length message still counts in the order.
	s0 := eps[0].Isend(1, 1, nil)
	s1 := eps[0].Isend(1, 1, []byte{42})
	one := []byte{0}
	wait(t, ctx, "recv empty", eps[1].Irecv(0, 1, nil))
	wait(t, ctx, "recv one", eps[1].Irecv(0, 1, one))
	wait(t, ctx, "send", s0)
	wait(t, ctx, "send", s1)
	if one[0] != 42 {
		t.Fatalf("got %d", one[0])
	}
}

func testLarge(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	const n = 8 << 20
	want := pattern(n, 8)
	for _, postFirst := range []bool{true, false} {
		got := make([]byte, n)
		var r, s transport.Request
		if postFirst {
			r = eps[1].Irecv(0, 9, got)
			s = eps[0].Isend(1, 9, want)
		} else {
			s = eps[0].Isend(1, 9, want)
			r = eps[1].Irecv(0, 9, got)
		}
		wait(t, ctx, "recv", r)
		wait(t, ctx, "send", s)
		if !bytes.Equal(got, want) {
			t.Fatalf("postFirst=%v: 8 MiB payload differs", postFirst)
		}
	}
}

func testPostedBeforeAndAfter(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 3)
	for _, n := range []int{1, 13, 4099, 65536, 300007} {
		want := pattern(n, n)
		// Posted before: the receive waits, then the message lands in it.
		got := make([]byte, n)
		r := eps[2].Irecv(1, 5, got)
		select {
		case <-r.Done():
			t.Fatalf("receive completed before any send: %v", r.Err())
		default:
		}
		wait(t, ctx, "send", eps[1].Isend(2, 5, want)) // completes once received
		wait(t, ctx, "recv", r)
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d posted first: payload differs", n)
		}
		// Posted after: the message waits (in the unexpected queue, or at
		// the sender for a rendezvous transport) until the receive comes.
		s := eps[1].Isend(2, 6, want)
		got2 := make([]byte, n)
		wait(t, ctx, "recv", eps[2].Irecv(1, 6, got2))
		wait(t, ctx, "send", s)
		if !bytes.Equal(got2, want) {
			t.Fatalf("n=%d posted after: payload differs", n)
		}
	}
}

// testConcurrent runs sends and receives in both directions between every
// pair of 4 ranks from many goroutines, one tag per goroutine.
func testConcurrent(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	const size, workers, msgs = 4, 4, 30
	eps := mesh(t, newMesh, size)
	var wg sync.WaitGroup
	errc := make(chan error, size*size*workers*2)
	for from := range size {
		for to := range size {
			for w := range workers {
				tag := transport.Tag(w + 100)
				n := 1 + (from*7+to*13+w*101)%5000
				wg.Add(2)
				go func() {
					defer wg.Done()
					for i := range msgs {
						if err := eps[from].Isend(to, tag, pattern(n, from*1e6+to*1e4+w*100+i)).Wait(ctx); err != nil {
							errc <- fmt.Errorf("send %d->%d tag %d #%d: %w", from, to, tag, i, err)
							return
						}
					}
				}()
				go func() {
					defer wg.Done()
					b := make([]byte, n)
					for i := range msgs {
						if err := eps[to].Irecv(from, tag, b).Wait(ctx); err != nil {
							errc <- fmt.Errorf("recv %d->%d tag %d #%d: %w", from, to, tag, i, err)
							return
						}
						if !bytes.Equal(b, pattern(n, from*1e6+to*1e4+w*100+i)) {
							errc <- fmt.Errorf("recv %d->%d tag %d #%d: payload differs", from, to, tag, i)
							return
						}
					}
				}()
			}
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func testWrongLength(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	for _, tc := range []struct{ sent, want int }{{10, 5}, {5, 10}, {0, 1}, {1, 0}, {100 << 10, 99 << 10}} {
		for _, postFirst := range []bool{true, false} {
			var r, s transport.Request
			msg, buf := make([]byte, tc.sent), make([]byte, tc.want)
			for i := range msg {
				msg[i] = byte(i*7 + 1)
			}
			if postFirst {
				r = eps[1].Irecv(0, 1, buf)
				s = eps[0].Isend(1, 1, msg)
			} else {
				s = eps[0].Isend(1, 1, msg)
				r = eps[1].Irecv(0, 1, buf)
			}
			err := r.Wait(ctx)
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrProtocol) || !errors.As(err, &pe) || pe.Peer != 0 {
				t.Fatalf("sent %d, receive of %d: got %v, want a PeerError for peer 0 wrapping ErrProtocol", tc.sent, tc.want, err)
			}
			// The common prefix is delivered, so a header can be read.
			if k := min(tc.sent, tc.want); !bytes.Equal(buf[:k], msg[:k]) {
				t.Fatalf("sent %d, receive of %d: the common prefix was not delivered", tc.sent, tc.want)
			}
			s.Wait(ctx) // the send's outcome is the transport's business
			// The link is still in step.
			got := make([]byte, 3)
			s = eps[0].Isend(1, 1, []byte("abc"))
			wait(t, ctx, "recv after mismatch", eps[1].Irecv(0, 1, got))
			wait(t, ctx, "send after mismatch", s)
			if string(got) != "abc" {
				t.Fatalf("after mismatch got %q", got)
			}
		}
	}
}

func testCloseUnblocks(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	r := eps[1].Irecv(0, 1, make([]byte, 4))
	rSelf := eps[1].Irecv(1, 1, make([]byte, 4))
	done := make(chan error, 1)
	go func() { done <- r.Wait(ctx) }()
	if err := eps[1].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("pending recv after Close: %v, want ErrClosed", err)
	}
	if err := rSelf.Wait(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("pending self recv after Close: %v, want ErrClosed", err)
	}
	if err := eps[1].Irecv(0, 1, make([]byte, 4)).Wait(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Irecv after Close: %v, want ErrClosed", err)
	}
	if err := eps[1].Isend(0, 1, make([]byte, 4)).Wait(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Isend after Close: %v, want ErrClosed", err)
	}
	if err := eps[1].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func testWaitDeadline(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	got := make([]byte, 3)
	r := eps[1].Irecv(0, 1, got)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := r.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > timeout/2 {
		t.Fatalf("Wait returned %v after its deadline", d)
	}
	// The request is still pending and completes normally later.
	wait(t, ctx, "send", eps[0].Isend(1, 1, []byte("xyz")))
	wait(t, ctx, "recv after deadline", r)
	if string(got) != "xyz" {
		t.Fatalf("got %q", got)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := eps[1].Irecv(0, 2, got).Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with cancelled ctx: %v", err)
	}
}

func testPeerClosed(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 3)
	r := eps[1].Irecv(0, 1, make([]byte, 8))
	r2 := eps[2].Irecv(0, 2, make([]byte, 1<<20))
	// A message 2 -> 1 is unaffected by rank 0 going away.
	ok := eps[1].Irecv(2, 1, make([]byte, 2))
	if err := eps[0].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, req := range []transport.Request{r, r2} {
		err := req.Wait(ctx)
		var pe *transport.PeerError
		if !errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &pe) || pe.Peer != 0 {
			t.Fatalf("rank %d: pending recv from closed rank 0: %v, want PeerError{Peer: 0} wrapping ErrPeerClosed", i+1, err)
		}
	}
	// Later receives from the dead peer fail too.
	err := eps[1].Irecv(0, 3, make([]byte, 1)).Wait(ctx)
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &pe) || pe.Peer != 0 {
		t.Fatalf("recv after peer closed: %v", err)
	}
	// Sends to it fail (perhaps not at once: a transport may buffer).
	for range 100 {
		if err = eps[2].Isend(0, 1, make([]byte, 4)).Wait(ctx); err != nil {
			break
		}
	}
	if !errors.Is(err, transport.ErrPeerClosed) && !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("send to closed peer: %v", err)
	}
	wait(t, ctx, "send 2->1", eps[2].Isend(1, 1, []byte("ok")))
	wait(t, ctx, "recv 2->1", ok)
}

func testBadPeer(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	for _, p := range []int{-1, 2, 100} {
		if err := eps[0].Isend(p, 0, nil).Wait(ctx); err == nil {
			t.Fatalf("Isend to rank %d succeeded", p)
		}
		if err := eps[0].Irecv(p, 0, nil).Wait(ctx); err == nil {
			t.Fatalf("Irecv from rank %d succeeded", p)
		}
	}
}

// checkLeak waits a little for goroutines to wind down, then reports if
// more are running than when the suite started.
func checkLeak(t *testing.T, before int) {
	t.Helper()
	var n int
	for range 100 {
		n = runtime.NumGoroutine()
		if n <= before {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	t.Fatalf("goroutine leak: %d before the suite, %d after\n%s", before, n, buf)
}

// cut cuts msg into pieces of the given lengths in turn (0: an empty
// piece), the last piece taking what is left.
func cut(msg []byte, lens ...int) [][]byte {
	var bufs [][]byte
	for _, n := range lens {
		n = min(n, len(msg))
		bufs = append(bufs, msg[:n:n])
		msg = msg[n:]
	}
	return append(bufs, msg)
}

// testVectored: an endpoint with vectored messages (transport.VecEndpoint)
// sends and receives them as ordinary messages: IsendV to Irecv, Isend to
// IrecvV, and IsendV to IrecvV cut otherwise, of no pieces, one, many and
// empty ones, small and large (past a ring's wrap and the eager and
// pulled thresholds of the transports here), the receive posted before
// and after the message, and to oneself. Skipped where the endpoint has
// none.
func testVectored(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	v0, ok0 := eps[0].(transport.VecEndpoint)
	v1, ok1 := eps[1].(transport.VecEndpoint)
	if !ok0 || !ok1 {
		t.Skip("no vectored messages")
	}
	if v0.Vectored(1) != v1.Vectored(0) {
		t.Fatalf("Vectored differs between the ends of a link: %v, %v", v0.Vectored(1), v1.Vectored(0))
	}
	type shape struct {
		n          int
		send, recv []int // piece lengths (nil: a plain message)
	}
	shapes := []shape{
		{0, []int{}, nil},
		{0, nil, []int{}},
		{0, []int{0, 0}, []int{0}},
		{10, []int{10}, nil},
		{10, nil, []int{3, 0}},
		{100, []int{1, 0, 49, 0}, []int{50, 50}},
		{70 << 10, []int{8 << 10, 0, 20 << 10}, []int{35 << 10}},
		{300 << 10, []int{100 << 10, 100 << 10}, nil},
		{300 << 10, nil, []int{1, 150 << 10, 0}},
		{1<<20 + 3, []int{256 << 10, 256 << 10, 256 << 10, 256 << 10}, []int{1 << 19, 1, 0, 1 << 19}},
		{3 << 20, []int{1 << 20, 0, 1 << 20}, []int{512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10}},
		{4 << 20, []int{64 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10}, []int{2 << 20}},
	}
	send := func(ep transport.Endpoint, to int, tag transport.Tag, msg []byte, lens []int) transport.Request {
		if lens == nil {
			return ep.Isend(to, tag, msg)
		}
		return ep.(transport.VecEndpoint).IsendV(to, tag, cut(msg, lens...))
	}
	recv := func(ep transport.Endpoint, from int, tag transport.Tag, buf []byte, lens []int) transport.Request {
		if lens == nil {
			return ep.Irecv(from, tag, buf)
		}
		return ep.(transport.VecEndpoint).IrecvV(from, tag, cut(buf, lens...))
	}
	for i, sh := range shapes {
		for _, postFirst := range []bool{true, false} {
			for _, to := range []int{1, 0} { // to the peer, and to oneself
				msg, buf := pattern(sh.n, i), make([]byte, sh.n)
				var s, r transport.Request
				if postFirst {
					r = recv(eps[to], 0, 3, buf, sh.recv)
					s = send(eps[0], to, 3, msg, sh.send)
				} else {
					s = send(eps[0], to, 3, msg, sh.send)
					r = recv(eps[to], 0, 3, buf, sh.recv)
				}
				what := fmt.Sprintf("%d bytes cut %v to %v, posted first %v, to %d", sh.n, sh.send, sh.recv, postFirst, to)
				wait(t, ctx, "recv of "+what, r)
				wait(t, ctx, "send of "+what, s)
				if !bytes.Equal(buf, msg) {
					t.Fatalf("%s: corrupt", what)
				}
			}
		}
	}
	// A stream of vectored messages in both directions at once, to go
	// round the rings and through the pulled path's hand-offs.
	const rounds = 12
	var reqs []transport.Request
	var msgs, bufs [][]byte
	for i := range rounds {
		for _, from := range []int{0, 1} {
			n := (i%4)*(300<<10) + 1000*i + 1
			msg, buf := pattern(n, 100+i), make([]byte, n)
			msgs, bufs = append(msgs, msg), append(bufs, buf)
			reqs = append(reqs, send(eps[from], 1-from, 4, msg, []int{n / 3, 0, n / 3}))
			reqs = append(reqs, recv(eps[1-from], from, 4, buf, []int{n / 2, 1}))
		}
	}
	for i, r := range reqs {
		wait(t, ctx, fmt.Sprintf("stream request %d", i), r)
	}
	for i := range msgs {
		if !bytes.Equal(bufs[i], msgs[i]) {
			t.Fatalf("stream message %d corrupt", i)
		}
	}
}

// testVectoredWrongLength: a vectored receive of another length than
// the message fails as Irecv does, with the common prefix in its pieces,
// and the link stays in step.
func testVectoredWrongLength(t *testing.T, newMesh MeshFunc) {
	ctx := ctxFor(t)
	eps := mesh(t, newMesh, 2)
	v0, ok0 := eps[0].(transport.VecEndpoint)
	v1, ok1 := eps[1].(transport.VecEndpoint)
	if !ok0 || !ok1 {
		t.Skip("no vectored messages")
	}
	for _, tc := range []struct{ sent, want int }{{10, 5}, {5, 10}, {0, 1}, {1, 0}, {600 << 10, 599 << 10}, {599 << 10, 600 << 10}} {
		for _, postFirst := range []bool{true, false} {
			var r, s transport.Request
			msg, buf := pattern(tc.sent, tc.want), make([]byte, tc.want)
			sv, rv := cut(msg, tc.sent/3, 0, tc.sent/3), cut(buf, tc.want/2)
			if postFirst {
				r = v1.IrecvV(0, 1, rv)
				s = v0.IsendV(1, 1, sv)
			} else {
				s = v0.IsendV(1, 1, sv)
				r = v1.IrecvV(0, 1, rv)
			}
			err := r.Wait(ctx)
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrLength) || !errors.As(err, &pe) || pe.Peer != 0 {
				t.Fatalf("sent %d, vectored receive of %d: got %v, want a PeerError for peer 0 wrapping ErrLength", tc.sent, tc.want, err)
			}
			if k := min(tc.sent, tc.want); !bytes.Equal(buf[:k], msg[:k]) {
				t.Fatalf("sent %d, vectored receive of %d: the common prefix was not delivered", tc.sent, tc.want)
			}
			s.Wait(ctx)
			got := make([]byte, 3)
			s = v0.IsendV(1, 1, [][]byte{[]byte("a"), nil, []byte("bc")})
			wait(t, ctx, "recv after mismatch", eps[1].Irecv(0, 1, got))
			wait(t, ctx, "send after mismatch", s)
			if string(got) != "abc" {
				t.Fatalf("after mismatch got %q", got)
			}
		}
	}
}
