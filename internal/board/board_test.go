package board

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/internal/clock"
	"github.com/goccl/goccl/transport"
)

// The layout: every slot and ack line on a line of its own, inside the
// block, none overlapping; an 8-byte payload shares its slot's first line
// with the sequence number and the fingerprint. What a member learns of
// the acks (known), which it writes on every call, starts a line of its
// own.
func TestLayout(t *testing.T) {
	if slotPayload+16 > Line {
		t.Errorf("a 16-byte payload ends at %d, past the slot's first line", slotPayload+16)
	}
	for _, n := range []int{2, 3, 5, 8, 64} {
		bs, _ := fakeMembers(t, n, 1)
		b := bs[0]
		type span struct{ at, end int }
		var spans []span
		for m := range n {
			for e := range uint64(anns) {
				spans = append(spans, span{b.annOff(m, e), b.annOff(m, e) + 8 + FPLen})
			}
			spans = append(spans, span{b.acks + m*Line, b.acks + m*Line + 16})
			for row := range 2 {
				spans = append(spans, span{b.slotOff(row, m), b.slotOff(row, m) + slotPayload + Max})
			}
		}
		if at := uintptr(unsafe.Pointer(&b.known[0])); at%Line != 0 || len(b.known) != 2*n {
			t.Errorf("n=%d: known at %#x, %d words: not in lines of its own", n, at, len(b.known))
		}
		seen := map[int]bool{}
		for _, s := range spans {
			if s.at%Line != 0 || s.end > Size(n) || s.end-s.at > slotBytes {
				t.Errorf("n=%d: span [%d, %d) misplaced (size %d)", n, s.at, s.end, Size(n))
			}
			for l := s.at / Line; l <= (s.end-1)/Line; l++ {
				if seen[l] {
					t.Errorf("n=%d: line %d used twice", n, l)
				}
				seen[l] = true
			}
		}
	}
}

// New refuses a block it cannot use.
func TestNewRefuses(t *testing.T) {
	blk := &block{mem: aligned(Size(3) + Line)}
	for _, tc := range []struct {
		name     string
		mem      []byte
		n, me    int
		contains string
	}{
		{"small", blk.mem[:Size(3)-1], 3, 0, "want"},
		{"unaligned", blk.mem[8:], 3, 0, "aligned"},
		{"member", blk.mem, 3, 3, "member 3 of 3"},
		{"alone", blk.mem, 1, 0, "member 0 of 1"},
	} {
		_, err := New(&fake{block: &block{mem: tc.mem}}, tc.n, tc.me, Polls)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.contains)) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.contains)
		}
	}
}

// free, the rule of slot reuse, as a table: this member's slot in prev's
// row takes a new call once every member, this one too, has acked prev,
// whether its ack line or its slots (known) say so. What known says is
// never taken for this member's own ack.
func TestFree(t *testing.T) {
	const prev = 5 // row 1
	for _, tc := range []struct {
		name  string
		acks  [3]uint64 // ack lines of row 1
		known [3]uint64 // learnt from slots, row 1
		want  bool
	}{
		{"all acked", [3]uint64{5, 5, 5}, [3]uint64{}, true},
		{"later acks", [3]uint64{7, 9, 5}, [3]uint64{}, true},
		{"a peer behind", [3]uint64{5, 3, 5}, [3]uint64{}, false},
		{"the last peer behind", [3]uint64{5, 5, 3}, [3]uint64{}, false},
		{"itself behind", [3]uint64{3, 5, 5}, [3]uint64{}, false},
		{"known from slots", [3]uint64{5, 0, 0}, [3]uint64{0, 5, 7}, true},
		{"known too old", [3]uint64{5, 0, 0}, [3]uint64{0, 3, 7}, false},
		{"own known ignored", [3]uint64{3, 5, 5}, [3]uint64{9, 0, 0}, false},
		{"known or line", [3]uint64{5, 5, 0}, [3]uint64{0, 0, 5}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs, _ := fakeMembers(t, 3, 1)
			b := bs[0]
			for m := range 3 {
				b.word(b.acks + m*Line + 8).Store(tc.acks[m])
				b.word(b.acks + m*Line).Store(99) // row 0's acks say nothing of row 1
				b.known[2*m+1].Store(tc.known[m])
			}
			if got := b.free(prev); got != tc.want {
				t.Errorf("free(%d) = %v, want %v", prev, got, tc.want)
			}
			for m := 1; m < 3; m++ { // what the ack lines said is learnt
				if tc.want && b.known[2*m+1].Load() < prev {
					t.Errorf("member %d: known %d after free", m, b.known[2*m+1].Load())
				}
			}
		})
	}
}

// learn keeps the largest ack it was told of.
func TestLearn(t *testing.T) {
	bs, _ := fakeMembers(t, 2, 1)
	b := bs[0]
	for _, tc := range []struct{ ack, want uint64 }{{3, 3}, {1, 3}, {7, 7}, {5, 7}} {
		b.learn(1, 1, tc.ack)
		if got := b.known[3].Load(); got != tc.want {
			t.Errorf("after learn(%d): %d, want %d", tc.ack, got, tc.want)
		}
	}
	if b.known[2].Load() != 0 {
		t.Errorf("learning row 1 changed row 0")
	}
}

// runCalls runs calls 1..calls on every member, each member in its own
// goroutine, alternating allreduces of words words and barriers, and
// checks every result.
func runCalls(t *testing.T, bs []*Board, calls, words int, scratch int) {
	t.Helper()
	n := len(bs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for m, b := range bs {
		wg.Go(func() {
			var r rows
			sc := make([]byte, scratch)
			for seq := uint64(1); seq <= uint64(calls); seq++ {
				c := r.call(seq, 1)
				if seq%7 == 0 {
					if err := b.Barrier(ctx, c); err != nil {
						errs[m] = fmt.Errorf("barrier %d: %w", seq, err)
						return
					}
					continue
				}
				buf := contribution(m, seq, words)
				if err := b.AllReduce(ctx, c, buf, sc, fold); err != nil {
					errs[m] = fmt.Errorf("call %d: %w", seq, err)
					return
				}
				if w := want(n, seq, words); !bytes.Equal(buf, w) {
					errs[m] = fmt.Errorf("call %d: %x, want %x", seq, buf, w)
					return
				}
			}
		})
	}
	wg.Wait()
	for m, err := range errs {
		if err != nil {
			t.Errorf("member %d: %v", m, err)
		}
	}
}

// Members over transport/mem and over a fake block run allreduces and
// barriers back to back, every member's result the reduction in member
// order (fold does not commute), payloads from nothing to Max, with and
// without room to keep a member's own contribution aside.
func TestAllReduce(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		for _, words := range []int{0, 1, 2, 3, Max / 8} {
			for _, scratch := range []int{0, Line} {
				name := fmt.Sprintf("n=%d/%dB/scratch=%d", n, 8*words, scratch)
				t.Run("mem/"+name, func(t *testing.T) {
					bs, _ := memMembers(t, n)
					runCalls(t, bs, 60, words, scratch)
				})
				t.Run("fake/"+name, func(t *testing.T) {
					bs, _ := fakeMembers(t, n, 4)
					runCalls(t, bs, 30, words, scratch)
				})
			}
		}
	}
}

// post runs b.Post of c with payload in a goroutine; the error comes on
// the channel.
func post(ctx context.Context, b *Board, c *Call, payload []byte) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.Post(ctx, c, payload) }()
	return ch
}

func must(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still waiting after 30 s", what)
	}
}

func pending(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v), want it waiting", what, err)
	case <-time.After(30 * time.Millisecond):
	}
}

// A member two calls ahead waits for the slowest ack before it reuses
// its slot: members 0 and 1 have finished calls 1 and 2; member 2 has
// posted both (async calls, out of order) but is still reading call 1.
// Member 0's call 3, in call 1's row, waits (on the acks of several: -1)
// and leaves its slot alone, so that member 2 still reads member 0's
// call 1 there, until member 2 acks call 1; member 1's ack alone does not
// free it.
func TestSlotReuseAfterEveryAck(t *testing.T) {
	ctx := context.Background()
	bs, _ := fakeMembers(t, 3, 1)
	var r [3]rows
	calls := func(m int, seq uint64) *Call { return r[m].call(seq, 1) }
	// Member 2 posts calls 1 and 2 and reads nothing yet.
	c21, c22 := calls(2, 1), calls(2, 2)
	p21 := post(ctx, bs[2], c21, contribution(2, 1, 1))
	p22 := post(ctx, bs[2], c22, contribution(2, 2, 1))
	for _, m := range []int{0, 1} {
		for seq := uint64(1); seq <= 2; seq++ {
			buf := contribution(m, seq, 1)
			go func(c *Call) {
				if err := bs[m].AllReduce(ctx, c, buf, nil, fold); err != nil {
					t.Errorf("member %d call %d: %v", m, c.Seq, err)
				}
			}(calls(m, seq))
		}
	}
	must(t, p21, "member 2's call 1")
	must(t, p22, "member 2's call 2")
	bs[2].Ack(2)
	// Members 0 and 1 end their calls 1 and 2 once member 2 has posted
	// them: wait for their acks.
	for _, m := range []int{0, 1} {
		for bs[2].ackOf(m, 0) < 2 || bs[2].ackOf(m, 1) < 1 {
			time.Sleep(time.Millisecond)
		}
	}

	h := &hooks{waiting: make(chan int, 4)}
	c03 := calls(0, 3)
	c03.Hooks = h
	p03 := post(ctx, bs[0], c03, contribution(0, 3, 1))
	if q := <-h.waiting; q != -1 {
		t.Fatalf("member 0's call 3 waits on member %d, want the acks (-1)", q)
	}
	pending(t, p03, "member 0's call 3 before member 2's ack")
	slot := bs[0].slotOff(1, 0)
	if got := bs[0].word(slot).Load(); got != 1 {
		t.Fatalf("member 0's slot in row 1 holds call %d before member 2 acked call 1", got)
	}
	if got := bs[2].Payload(1, 0, 8); !bytes.Equal(got, contribution(0, 1, 1)) {
		t.Fatalf("member 2 reads %x in member 0's slot of call 1, want %x", got, contribution(0, 1, 1))
	}
	bs[1].Ack(1) // again: no change
	pending(t, p03, "member 0's call 3 with member 1's ack")
	bs[2].Ack(1)
	// Now the slot takes call 3; the call waits for the peers' posts.
	for bs[2].word(slot).Load() != 3 {
		time.Sleep(time.Millisecond)
	}
	p13 := post(ctx, bs[1], calls(1, 3), contribution(1, 3, 1))
	p23 := post(ctx, bs[2], calls(2, 3), contribution(2, 3, 1))
	must(t, p03, "member 0's call 3")
	must(t, p13, "member 1's call 3")
	must(t, p23, "member 2's call 3")
	if got := bs[2].Payload(3, 0, 8); !bytes.Equal(got, contribution(0, 3, 1)) {
		t.Errorf("member 2 reads %x in member 0's slot of call 3", got)
	}
}

// A member learns from its peers' slots that they have acked the other
// row (the ack each slot carries), so that its next call in that row
// finds the slot free without reading their ack lines.
func TestAcksLearntFromSlots(t *testing.T) {
	bs, _ := fakeMembers(t, 3, Polls)
	runCalls(t, bs, 4, 1, Line) // calls 1..4: each member has read call 3
	for me, b := range bs {
		for m := range 3 {
			if m == me {
				continue
			}
			// Member m's slot of call 4 (row 0) carried its ack of row
			// 1 (call 3); its slot of call 3, its ack of row 0 (call 2).
			if got := b.known[2*m+1].Load(); got != 3 {
				t.Errorf("member %d: member %d's ack of row 1 learnt as %d, want 3", me, m, got)
			}
			if got := b.known[2*m].Load(); got != 2 {
				t.Errorf("member %d: member %d's ack of row 0 learnt as %d, want 2", me, m, got)
			}
		}
	}
}

// Async calls of one member, started in any order from goroutines of
// their own: a call whose previous call in its row has not ended waits
// for it, and every call's result is right. Each member starts its calls
// in a random order.
func TestOutOfOrderCallers(t *testing.T) {
	const n, calls = 3, 24
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // all the rounds
	defer cancel()
	for round := range 5 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			bs, _ := fakeMembers(t, n, 1)
			rng := rand.New(rand.NewPCG(uint64(round), 1))
			var wg sync.WaitGroup
			for m, b := range bs {
				var r rows
				cs := make([]*Call, calls)
				for i := range cs {
					cs[i] = r.call(uint64(i+1), 1)
				}
				for _, i := range rng.Perm(calls) {
					c := cs[i]
					wg.Go(func() {
						buf := contribution(m, c.Seq, 2)
						if err := b.AllReduce(ctx, c, buf, nil, fold); err != nil {
							t.Errorf("member %d call %d: %v", m, c.Seq, err)
						} else if w := want(n, c.Seq, 2); !bytes.Equal(buf, w) {
							t.Errorf("member %d call %d: %x, want %x", m, c.Seq, buf, w)
						}
					})
				}
			}
			wg.Wait()
		})
	}
}

// A call whose previous call in its row is this member's own and has not
// ended waits for it (its own ack is missing), telling its hooks it waits
// on the acks (-1).
func TestWaitsForOwnPrev(t *testing.T) {
	ctx := context.Background()
	bs, _ := fakeMembers(t, 2, 1)
	var r [2]rows
	c01, c02 := r[0].call(1, 1), r[0].call(2, 1)
	c03 := r[0].call(3, 1)
	h := &hooks{waiting: make(chan int, 4)}
	c03.Hooks = h
	p03 := post(ctx, bs[0], c03, contribution(0, 3, 1))
	if q := <-h.waiting; q != -1 {
		t.Fatalf("call 3 waits on %d, want the acks (-1)", q)
	}
	pending(t, p03, "call 3 before call 1 was posted")
	ch := make(chan error, 2)
	for m, cs := range [][]*Call{{c01, c02}, {r[1].call(1, 1), r[1].call(2, 1), r[1].call(3, 1)}} {
		go func() {
			for _, c := range cs {
				if err := bs[m].AllReduce(ctx, c, contribution(m, c.Seq, 1), nil, fold); err != nil {
					ch <- err
					return
				}
			}
			ch <- nil
		}()
	}
	must(t, ch, "calls")
	must(t, ch, "calls")
	must(t, p03, "call 3")
}

// A member whose call does not run on the board announces it; a member
// waiting for its slot of that call fails at once naming it, with both
// fingerprints, whether the announcement came before or during the wait.
// An announcement of another call in the same entry is not this call's.
func TestAnnounced(t *testing.T) {
	for _, tc := range []struct {
		name  string
		early bool // announced before the wait
		same  bool // the same fingerprint: the call runs off the board there
	}{{"before", true, false}, {"during", false, false}, {"same call", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			bs, _ := fakeMembers(t, 2, 1)
			mine, theirs := fp(1, 1), fp(1, 2)
			if tc.same {
				theirs = mine
			}
			bs[1].Announce(9, fp(9, 3)) // entry 1, another call
			h := &hooks{waiting: make(chan int, 4)}
			if tc.early {
				bs[1].Announce(1, theirs)
			}
			ch := post(ctx, bs[0], &Call{Seq: 1, FP: mine, Check: true, Hooks: h}, make([]byte, 8))
			if q := <-h.waiting; q != 1 {
				t.Errorf("waits on %d, want member 1", q)
			}
			if !tc.early {
				pending(t, ch, "a call of which member 1 announced nothing")
				bs[1].Announce(1, theirs)
			}
			err := <-ch
			var me *MismatchError
			if !errors.As(err, &me) || *me != (MismatchError{Member: 1, Seq: 1, Mine: *mine, Theirs: *theirs, Announced: true}) {
				t.Fatalf("%v, want a MismatchError of call 1 announced by member 1", err)
			}
		})
	}
}

// Fingerprints that differ fail the call on both members, each naming
// the other, wherever they differ; without Check they pass.
func TestFingerprintsDiffer(t *testing.T) {
	for _, at := range []int{0, 7, 8, 17, 31} {
		for _, check := range []bool{true, false} {
			t.Run(fmt.Sprintf("byte=%d/check=%v", at, check), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				bs, _ := fakeMembers(t, 2, Polls)
				fps := [2]*[FPLen]byte{fp(1, 1), fp(1, 1)}
				fps[1][at] ^= 0x40
				var chs [2]<-chan error
				for m := range 2 {
					chs[m] = post(ctx, bs[m], &Call{Seq: 1, FP: fps[m], Check: check}, make([]byte, 8))
				}
				for m, ch := range chs {
					err := <-ch
					if !check {
						if err != nil {
							t.Errorf("member %d: %v, want none without the check", m, err)
						}
						continue
					}
					var me *MismatchError
					if !errors.As(err, &me) || *me != (MismatchError{Member: 1 - m, Seq: 1, Mine: *fps[m], Theirs: *fps[1-m]}) {
						t.Errorf("member %d: %v, want a MismatchError naming member %d", m, err, 1-m)
					}
				}
			})
		}
	}
}

// Payloads of other lengths fail with both lengths.
func TestLengthDiffers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, _ := fakeMembers(t, 2, Polls)
	var chs [2]<-chan error
	for m := range 2 {
		chs[m] = post(ctx, bs[m], &Call{Seq: 1, FP: fp(1, 1), Check: true}, make([]byte, 8+8*m))
	}
	for m, ch := range chs {
		var le *LengthError
		if err := <-ch; !errors.As(err, &le) || *le != (LengthError{Member: 1 - m, Seq: 1, Got: 8 + 8*(1-m), Want: 8 + 8*m}) {
			t.Errorf("member %d: %v, want a LengthError", m, err)
		}
	}
}

// What else ends a wait: a lost member (the one waited on, or any found
// while waiting on the acks of several), this member's board closed, the
// caller's abort, the context's end. Each is a WaitError naming the
// member, -1 where none is to blame.
func TestWaitEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		acks   bool // the call waits on the acks (its prev), not on a slot
		end    func(fs []*fake, h *hooks, cancel context.CancelFunc)
		member int
		is     error
	}{
		{"lost", false, func(fs []*fake, _ *hooks, _ context.CancelFunc) { fs[1].lost[1].Store(true) }, 1, transport.ErrPeerClosed},
		{"lost acking", true, func(fs []*fake, _ *hooks, _ context.CancelFunc) { fs[2].lost[2].Store(true) }, 2, transport.ErrPeerClosed},
		{"closed", false, func(fs []*fake, _ *hooks, _ context.CancelFunc) { fs[0].Close() }, 1, transport.ErrClosed},
		{"aborted", false, func(_ []*fake, h *hooks, _ context.CancelFunc) { h.aborted.Store(true) }, 1, ErrAborted},
		{"aborted acking", true, func(_ []*fake, h *hooks, _ context.CancelFunc) { h.aborted.Store(true) }, -1, transport.ErrClosed},
		{"cancelled", false, func(_ []*fake, _ *hooks, cancel context.CancelFunc) { cancel() }, 1, context.Canceled},
		{"cancelled acking", true, func(_ []*fake, _ *hooks, cancel context.CancelFunc) { cancel() }, -1, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			bs, fs := fakeMembers(t, 3, 1)
			h := &hooks{waiting: make(chan int, 4)}
			c := &Call{Seq: 1, FP: fp(1, 1), Check: true, Hooks: h}
			if tc.acks {
				c.Seq, c.Prev = 3, 1 // nobody has acked call 1
			} else {
				// Member 2 posts call 1 and waits for the others.
				go bs[2].Post(ctx, &Call{Seq: 1, FP: fp(1, 1)}, nil)
			}
			ch := post(ctx, bs[0], c, nil)
			q := <-h.waiting
			if want := map[bool]int{true: -1, false: 1}[tc.acks]; q != want {
				t.Errorf("waits on %d, want %d", q, want)
			}
			pending(t, ch, "the call")
			tc.end(fs, h, cancel)
			var we *WaitError
			err := <-ch
			if !errors.As(err, &we) || we.Member != tc.member || we.Seq != c.Seq || !errors.Is(err, tc.is) {
				t.Errorf("%v, want a WaitError naming member %d, wrapping %v", err, tc.member, tc.is)
			}
			for _, f := range fs {
				f.Close() // ends member 2's post
			}
		})
	}
}

// A lost member ends a wait over transport/mem too: its endpoint closes.
func TestLostMemberMem(t *testing.T) {
	bs, eps := memMembers(t, 2)
	ch := post(context.Background(), bs[0], &Call{Seq: 1, FP: fp(1, 1), Check: true}, nil)
	pending(t, ch, "the call")
	eps[1].Close()
	var we *WaitError
	if err := <-ch; !errors.As(err, &we) || we.Member != 1 || !errors.Is(err, transport.ErrPeerClosed) {
		t.Errorf("%v, want a WaitError naming member 1, which closed", err)
	}
}

// The call's clock: a call that finds its peers' slots within its polls
// tells its hooks nothing, and its start is stamped once it has
// published, unless it was known already; one that waits tells its hooks
// first.
func TestStampAndHooks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, _ := fakeMembers(t, 2, 1<<20)
	// Member 1 posts first; member 0 then finds its slot.
	h1 := &hooks{}
	var s1 clock.Stamp
	p1 := post(ctx, bs[1], &Call{Seq: 1, FP: fp(1, 1), Check: true, Hooks: h1, Started: &s1}, nil)
	for bs[0].word(bs[0].slotOff(1, 1)).Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	h0 := &hooks{}
	var s0 clock.Stamp
	before := clock.Now()
	if err := bs[0].Post(ctx, &Call{Seq: 1, FP: fp(1, 1), Check: true, Hooks: h0, Started: &s0}, nil); err != nil {
		t.Fatal(err)
	}
	must(t, p1, "member 1")
	if w := h0.seen(); len(w) != 0 {
		t.Errorf("member 0, which found member 1's slot, waited on %v", w)
	}
	if s0 < before || s1 == 0 || s1 > s0 {
		t.Errorf("stamps: member 1 %d, member 0 %d, after %d", s1, s0, before)
	}
	// A stamp already made stays; no stamp is fine too.
	bs[0].Ack(1)
	bs[1].Ack(1)
	s0, s1 = 42, 0
	p1 = post(ctx, bs[1], &Call{Seq: 2, FP: fp(2, 1), Check: true}, nil)
	if err := bs[0].Post(ctx, &Call{Seq: 2, FP: fp(2, 1), Check: true, Started: &s0}, nil); err != nil {
		t.Fatal(err)
	}
	must(t, p1, "member 1")
	if s0 != 42 {
		t.Errorf("a known start became %d", s0)
	}

	// A waiting call: the hooks hear of it before its peer comes.
	bs2, _ := fakeMembers(t, 2, 1)
	h := &hooks{waiting: make(chan int, 1)}
	var s clock.Stamp
	ch := post(ctx, bs2[0], &Call{Seq: 1, FP: fp(1, 1), Hooks: h, Started: &s}, nil)
	if q := <-h.waiting; q != 1 {
		t.Errorf("waits on %d, want 1", q)
	}
	if s == 0 {
		t.Errorf("no start stamped before the wait")
	}
	must(t, post(ctx, bs2[1], &Call{Seq: 1, FP: fp(1, 1)}, nil), "member 1")
	must(t, ch, "member 0")
}

// An allreduce on the board allocates nothing while the members keep
// pace (no wait through the transport): the calls below poll without
// end, so that a member a scheduler slice behind is still found by
// polling. Counted over both members' calls.
func TestAllReduceAllocatesNothing(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("the members poll each other: needs two processors")
	}
	const calls = 2000
	bs, _ := fakeMembers(t, 2, math.MaxInt)
	var ready, start, done sync.WaitGroup
	start.Add(1)
	errs := make([]error, 2)
	hs := []*hooks{{}, {}}
	for m, b := range bs {
		ready.Add(1)
		done.Go(func() {
			ctx := context.Background()
			buf, scratch := make([]byte, 8), make([]byte, Line)
			fp := fp(0, 1)
			var r rows
			st := new(clock.Stamp) // what a Call points to escapes: one for all the calls
			ready.Done()
			start.Wait()
			for seq := uint64(1); seq <= calls; seq++ {
				*st = 0
				c := Call{Seq: seq, Prev: r[seq&1], FP: fp, Check: true, Started: st, Hooks: hs[m]}
				r[seq&1] = seq
				if err := b.AllReduce(ctx, &c, buf, scratch, fold); err != nil {
					errs[m] = err
					return
				}
			}
		})
	}
	ready.Wait()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start.Done()
	done.Wait()
	runtime.ReadMemStats(&after)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for m, h := range hs {
		if w := h.seen(); len(w) > 0 {
			t.Fatalf("member %d waited through the transport %d times", m, len(w))
		}
	}
	if n := after.Mallocs - before.Mallocs; n > 0 {
		t.Errorf("%d allocations in %d calls of 2 members", n, calls)
	}
}
