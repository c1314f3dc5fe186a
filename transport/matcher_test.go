package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func msgOf(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestMatcherPostedAndUnexpected(t *testing.T) {
	ctx := testCtx(t)
	for _, n := range []int{0, 1, 7, 4096, 65537} {
		for _, mode := range []string{"copy", "owned", "ref", "reader"} {
			for _, postFirst := range []bool{true, false} {
				t.Run(fmt.Sprintf("n=%d/%s/postFirst=%v", n, mode, postFirst), func(t *testing.T) {
					m := NewMatcher(3)
					want := msgOf(n, 3)
					got := make([]byte, n)
					var req Request
					if postFirst {
						req = m.Post(2, 5, got)
					}
					src := append([]byte(nil), want...)
					var refDone chan error
					switch mode {
					case "copy":
						if err := m.Deliver(2, 5, src); err != nil {
							t.Fatal(err)
						}
						clear(src) // the matcher must have copied it
					case "owned":
						if err := m.DeliverOwned(2, 5, src); err != nil {
							t.Fatal(err)
						}
					case "ref":
						refDone = make(chan error, 1)
						if err := m.DeliverRef(2, 5, src, func(err error) { refDone <- err }); err != nil {
							t.Fatal(err)
						}
					case "reader":
						if err := m.DeliverFrom(2, 5, n, bytes.NewReader(src), func(e error) error { return e }); err != nil {
							t.Fatal(err)
						}
					}
					if !postFirst {
						req = m.Post(2, 5, got)
					}
					if err := req.Wait(ctx); err != nil {
						t.Fatal(err)
					}
					if refDone != nil {
						if err := <-refDone; err != nil {
							t.Fatalf("done(%v), want nil", err)
						}
					}
					if !bytes.Equal(got, want) {
						t.Fatal("payload differs")
					}
				})
			}
		}
	}
}

func TestMatcherOrderAndTags(t *testing.T) {
	ctx := testCtx(t)
	m := NewMatcher(2)
	const n = 50
	// Interleave: some receives posted first, some messages first, two tags.
	var reqs [2][]Request
	var bufs [2][][]byte
	for i := 0; i < n; i++ {
		for tag := Tag(0); tag < 2; tag++ {
			b := make([]byte, 2)
			bufs[tag] = append(bufs[tag], b)
			if i%3 == 0 {
				reqs[tag] = append(reqs[tag], m.Post(1, tag, b))
				m.Deliver(1, tag, []byte{byte(tag), byte(i)})
			} else {
				m.Deliver(1, tag, []byte{byte(tag), byte(i)})
				reqs[tag] = append(reqs[tag], m.Post(1, tag, b))
			}
		}
	}
	for tag := range 2 {
		for i, r := range reqs[tag] {
			if err := r.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if bufs[tag][i][0] != byte(tag) || bufs[tag][i][1] != byte(i) {
				t.Fatalf("tag %d msg %d: got %v", tag, i, bufs[tag][i])
			}
		}
	}
	if len(m.peers[1].tags) != 0 {
		t.Fatalf("queues left behind: %d", len(m.peers[1].tags))
	}
}

func TestMatcherLengthMismatch(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct{ want, got int }{{4, 5}, {5, 4}, {0, 1}, {1, 0}} {
		for _, postFirst := range []bool{true, false} {
			m := NewMatcher(2)
			var req Request
			if postFirst {
				req = m.Post(1, 0, make([]byte, tc.want))
			}
			m.Deliver(1, 0, make([]byte, tc.got))
			if !postFirst {
				req = m.Post(1, 0, make([]byte, tc.want))
			}
			err := req.Wait(ctx)
			var pe *PeerError
			if !errors.Is(err, ErrProtocol) || !errors.As(err, &pe) || pe.Peer != 1 {
				t.Fatalf("%+v postFirst=%v: err %v, want ErrProtocol from peer 1", tc, postFirst, err)
			}
			// The stream stays in step.
			m.Deliver(1, 0, []byte{9})
			b := make([]byte, 1)
			if err := m.Post(1, 0, b).Wait(ctx); err != nil || b[0] != 9 {
				t.Fatalf("next message: %v %v", err, b)
			}
		}
	}
	// DeliverFrom discards the payload and keeps the reader in step.
	m := NewMatcher(2)
	req := m.Post(1, 0, make([]byte, 3))
	r := bytes.NewReader([]byte{1, 2, 3, 4, 5, 6})
	if err := m.DeliverFrom(1, 0, 5, r, nil); err != nil {
		t.Fatal(err)
	}
	if err := req.Wait(ctx); !errors.Is(err, ErrProtocol) {
		t.Fatalf("got %v", err)
	}
	if r.Len() != 1 {
		t.Fatalf("reader left %d bytes, want 1", r.Len())
	}
}

func TestMatcherDeliverFromShortRead(t *testing.T) {
	ctx := testCtx(t)
	m := NewMatcher(2)
	req := m.Post(1, 0, make([]byte, 8))
	boom := errors.New("boom")
	err := m.DeliverFrom(1, 0, 8, bytes.NewReader([]byte{1, 2}), func(error) error { return boom })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("DeliverFrom: %v", err)
	}
	if err := req.Wait(ctx); err != boom {
		t.Fatalf("request: %v", err)
	}
}

func TestMatcherAbortAndFailPeer(t *testing.T) {
	ctx := testCtx(t)
	m := NewMatcher(3)
	peerErr := &PeerError{Op: "recv", Peer: 1, Err: ErrPeerClosed}
	m.Deliver(1, 0, []byte{1})               // arrived before the peer died
	pending := m.Post(1, 1, make([]byte, 1)) // will fail
	refErr := make(chan error, 1)
	m.DeliverRef(1, 2, []byte{2}, func(e error) { refErr <- e }) // borrowed: dropped
	m.FailPeer(1, peerErr)
	if err := pending.Wait(ctx); err != peerErr {
		t.Fatalf("pending: %v", err)
	}
	if err := <-refErr; err != peerErr {
		t.Fatalf("ref done: %v", err)
	}
	b := make([]byte, 1)
	if err := m.Post(1, 0, b).Wait(ctx); err != nil || b[0] != 1 {
		t.Fatalf("early message lost: %v %v", err, b)
	}
	if err := m.Post(1, 0, b).Wait(ctx); err != peerErr {
		t.Fatalf("after: %v", err)
	}
	// Other peers are unaffected.
	r2 := m.Post(2, 0, b)
	m.Deliver(2, 0, []byte{3})
	if err := r2.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	r2 = m.Post(2, 0, b)
	m.DeliverRef(0, 0, []byte{4}, func(e error) { refErr <- e })
	m.Abort(ErrClosed)
	if err := r2.Wait(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("abort: %v", err)
	}
	if err := <-refErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("abort ref: %v", err)
	}
	if err := m.Post(0, 0, b).Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("post after abort: %v", err)
	}
	if err := m.Deliver(0, 0, b); !errors.Is(err, ErrClosed) {
		t.Fatalf("deliver after abort: %v", err)
	}
	if err := m.Post(7, 0, b).Err(); err == nil {
		t.Fatal("out-of-range peer accepted")
	}
}

func TestMatcherConcurrent(t *testing.T) {
	ctx := testCtx(t)
	const peers, tags, n = 4, 4, 200
	m := NewMatcher(peers)
	var wg sync.WaitGroup
	errs := make(chan error, peers*tags)
	for p := range peers {
		for tag := range Tag(tags) {
			wg.Add(2)
			go func() { // the "reader" of (p, tag)
				defer wg.Done()
				for i := range n {
					m.Deliver(p, tag, []byte{byte(p), byte(tag), byte(i)})
				}
			}()
			go func() {
				defer wg.Done()
				b := make([]byte, 3)
				for i := range n {
					if err := m.Post(p, tag, b).Wait(ctx); err != nil {
						errs <- err
						return
					}
					if b[0] != byte(p) || b[1] != byte(tag) || b[2] != byte(i) {
						errs <- fmt.Errorf("peer %d tag %d msg %d: got %v", p, tag, i, b)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestReqWait(t *testing.T) {
	r := NewRequest()
	if r.Err() != nil {
		t.Fatal("pending request has an error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	boom := errors.New("boom")
	if !r.Complete(boom) || r.Complete(nil) {
		t.Fatal("Complete must succeed exactly once")
	}
	if err := r.Wait(context.Background()); err != boom || r.Err() != boom {
		t.Fatalf("got %v", err)
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Done not closed")
	}
	c := Completed(nil)
	if err := c.Wait(ctx); err != nil { // completed beats an expired ctx
		t.Fatal(err)
	}
}

func TestCounting(t *testing.T) {
	ep := Counting(loopEndpoint{size: 3})
	ep.Isend(1, 0, make([]byte, 10))
	ep.Isend(1, 0, make([]byte, 5))
	ep.Irecv(2, 0, make([]byte, 7))
	ep.Isend(9, 0, nil) // out of range: not counted
	s := ep.Stats()
	if s.Peers[1] != (PeerStats{SentMsgs: 2, SentBytes: 15}) || s.Peers[2] != (PeerStats{RecvMsgs: 1, RecvBytes: 7}) {
		t.Fatalf("stats %+v", s)
	}
	if tot := s.Total(); tot != (PeerStats{2, 15, 1, 7}) {
		t.Fatalf("total %+v", tot)
	}
	ep.Reset()
	if tot := ep.Stats().Total(); tot != (PeerStats{}) {
		t.Fatalf("after reset %+v", tot)
	}
}

type loopEndpoint struct{ size int }

func (l loopEndpoint) Rank() int                      { return 0 }
func (l loopEndpoint) Size() int                      { return l.size }
func (l loopEndpoint) Isend(int, Tag, []byte) Request { return Completed(nil) }
func (l loopEndpoint) Irecv(int, Tag, []byte) Request { return Completed(nil) }
func (l loopEndpoint) Close() error                   { return nil }

func BenchmarkMatcherPostThenDeliver(b *testing.B) {
	m := NewMatcher(2)
	buf := make([]byte, 64)
	msg := make([]byte, 64)
	ctx := context.Background()
	b.SetBytes(64)
	b.ReportAllocs()
	for b.Loop() {
		r := m.Post(1, 3, buf)
		m.Deliver(1, 3, msg)
		r.Wait(ctx)
	}
}

func BenchmarkMatcherDeliverThenPost(b *testing.B) {
	m := NewMatcher(2)
	buf := make([]byte, 64)
	msg := make([]byte, 64)
	ctx := context.Background()
	b.SetBytes(64)
	b.ReportAllocs()
	for b.Loop() {
		m.Deliver(1, 3, msg)
		m.Post(1, 3, buf).Wait(ctx)
	}
}

// A message under a finished tag is dropped and reported, whether it
// arrives after the tag is finished or was queued when it is retired;
// other tags, and messages that find a posted receive, are not touched.
func TestMatcherStray(t *testing.T) {
	m := NewMatcher(2)
	type report struct {
		from int
		tag  Tag
		head string
	}
	var got []report
	done := map[Tag]bool{}
	m.SetStray(func(tag Tag) bool { return done[tag] }, func(from int, tag Tag, head []byte) {
		got = append(got, report{from, tag, string(head)})
	})
	m.Deliver(1, 7, []byte("early, then retired"))
	m.Deliver(1, 8, []byte("another tag"))
	done[7] = true
	m.Retire(7)
	m.Deliver(1, 7, []byte("late"))
	r := m.Post(1, 9, make([]byte, 4))
	done[9] = true
	m.Deliver(1, 9, []byte("mine")) // a posted receive takes it
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []report{{1, 7, "early, then retired"}, {1, 7, "late"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("reports %+v, want %+v", got, want)
	}
	b := make([]byte, len("another tag"))
	if err := m.Post(1, 8, b).Wait(context.Background()); err != nil || string(b) != "another tag" {
		t.Fatalf("tag 8: %q, %v", b, err)
	}
}

// A message delivered while its tag is being finished and retired is
// reported, never left queued: Retire passes the peers with nothing
// queued without their lock, so Deliver must count a message before it
// looks at finished. The test retires the tag at the worst moment: from
// inside Deliver's look at finished, which says "not yet".
func TestMatcherRetireRace(t *testing.T) {
	m := NewMatcher(2)
	var finished atomic.Bool
	var reported atomic.Int64
	retired := make(chan struct{})
	m.SetStray(func(Tag) bool {
		if finished.Swap(true) {
			return true
		}
		go func() { // the owner finishes the call and retires its tag
			m.Retire(7)
			close(retired)
		}()
		select { // a Retire that looks at this peer waits for its lock
		case <-retired:
		case <-time.After(50 * time.Millisecond):
		}
		return false
	}, func(int, Tag, []byte) { reported.Add(1) })
	m.Deliver(1, 7, []byte("x"))
	<-retired
	if got := reported.Load(); got != 1 {
		t.Fatalf("%d reports, want 1: the message stayed queued under a retired tag", got)
	}
}
