//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

func FuzzSlotHeader(f *testing.F) {
	mk := func(kind, chunk uint32, tag, total uint64) []byte {
		b := make([]byte, slotHdrSize)
		putSlot(b, slotHdr{kind: kind, chunk: chunk, tag: transport.Tag(tag), total: total})
		return b
	}
	f.Add(mk(kindFirst, 8, 1, 8), uint32(8160), uint64(0))
	f.Add(mk(kindFirst, 8160, 1, 1<<20), uint32(8160), uint64(0))
	f.Add(mk(kindCont, 100, 0, 0), uint32(8160), uint64(100))
	f.Add(mk(kindCont, 9000, 0, 0), uint32(8160), uint64(1<<20))
	f.Add(mk(7, 0, 0, 0), uint32(32), uint64(0))
	f.Add(mk(kindCMA, cmaDescSize, 3, 1<<20), uint32(8160), uint64(0))
	f.Add([]byte{1, 2, 3}, uint32(32), uint64(0))
	const maxMsg = 1 << 32
	f.Fuzz(func(t *testing.T, b []byte, payloadCap uint32, left uint64) {
		h, err := parseSlot(b, payloadCap, maxMsg, left)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if h.chunk > payloadCap {
			t.Fatalf("accepted a chunk of %d bytes in a slot of %d", h.chunk, payloadCap)
		}
		switch h.kind {
		case kindFirst:
			if left != 0 || h.total > maxMsg || uint64(h.chunk) > h.total {
				t.Fatalf("accepted first slot %+v with %d bytes left", h, left)
			}
		case kindCont:
			if left == 0 || uint64(h.chunk) > left {
				t.Fatalf("accepted continuation %+v with %d bytes left", h, left)
			}
		case kindCMA:
			if left != 0 || h.total > maxMsg || h.total == 0 || h.chunk != cmaDescSize {
				t.Fatalf("accepted cma descriptor %+v with %d bytes left", h, left)
			}
		default:
			t.Fatalf("accepted kind %d", h.kind)
		}
	})
}

func pair(t *testing.T, cfg Config) [2]*Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.JobID, cfg.Nonce = "internal", fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	for i, r := range cfg.Nonce {
		if r == '/' {
			cfg.Nonce = cfg.Nonce[:i] + "_" + cfg.Nonce[i+1:]
		}
	}
	var eps [2]*Endpoint
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.Rank, c.Size = i, 2
			eps[i], errs[i] = Connect(ctx, c)
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	t.Cleanup(func() { eps[0].Close(); eps[1].Close() })
	return eps
}

// TestGarbage writes bad slots and indices into rank 0's ring to rank 1:
// rank 1 fails the receive with ErrProtocol naming rank 0, reports the
// loss, and rank 0's later sends fail; nothing crashes.
func TestGarbage(t *testing.T) {
	cases := map[string]func(r *ring){
		"chunk past the slot": func(r *ring) {
			putSlot(r.slot(r.pos), slotHdr{kind: kindFirst, chunk: r.cap + 1, tag: 1, total: uint64(r.cap) + 1})
			r.pos++
			r.head.Store(r.pos)
		},
		"bad kind": func(r *ring) {
			putSlot(r.slot(r.pos), slotHdr{kind: 99, chunk: 4, tag: 1, total: 4})
			r.pos++
			r.head.Store(r.pos)
		},
		"continuation first": func(r *ring) {
			putSlot(r.slot(r.pos), slotHdr{kind: kindCont, chunk: 4})
			r.pos++
			r.head.Store(r.pos)
		},
		"huge message": func(r *ring) {
			putSlot(r.slot(r.pos), slotHdr{kind: kindFirst, chunk: r.cap, tag: 1, total: 1 << 62})
			r.pos++
			r.head.Store(r.pos)
		},
		"cma address not mapped": func(r *ring) {
			s := r.slot(r.pos)
			putSlot(s, slotHdr{kind: kindCMA, chunk: cmaDescSize, tag: 1, total: 1 << 20})
			binary.LittleEndian.PutUint64(s[slotHdrSize:], 8)
			r.pos++
			r.head.Store(r.pos)
		},
		"head out of range": func(r *ring) {
			r.head.Store(r.pos + r.slots + 7)
		},
		"head backwards": func(r *ring) {
			r.head.Store(r.pos - 1)
		},
		"short continuation": func(r *ring) {
			putSlot(r.slot(r.pos), slotHdr{kind: kindFirst, chunk: r.cap, tag: 1, total: 3 * uint64(r.cap)})
			putSlot(r.slot(r.pos+1), slotHdr{kind: kindCont, chunk: 5})
			r.pos += 2
			r.head.Store(r.pos)
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			eps := pair(t, Config{SlotSize: 256, Slots: 8})
			lost := make(chan *transport.PeerError, 1)
			eps[1].OnPeerLoss(func(pe *transport.PeerError) { lost <- pe })
			// A message first, to check the ring was in step.
			got := make([]byte, 3)
			if err := eps[0].Isend(1, 1, []byte("abc")).Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if err := eps[1].Irecv(0, 1, got).Wait(ctx); err != nil || string(got) != "abc" {
				t.Fatalf("%q %v", got, err)
			}
			r := eps[1].Irecv(0, 1, make([]byte, 3*256))
			corrupt(eps[0].peers[1].out)
			kick(eps[0].peers[1].out.dataSeq)
			err := r.Wait(ctx)
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrProtocol) || !errors.As(err, &pe) || pe.Peer != 0 {
				t.Fatalf("recv: %v, want a PeerError naming rank 0 wrapping ErrProtocol", err)
			}
			select {
			case pe := <-lost:
				if pe.Peer != 0 || !errors.Is(pe, transport.ErrProtocol) {
					t.Fatalf("loss reported: %v", pe)
				}
			case <-ctx.Done():
				t.Fatal("no loss reported")
			}
			if err := eps[0].Isend(1, 2, []byte("x")).Wait(ctx); !errors.Is(err, transport.ErrPeerClosed) {
				t.Fatalf("send to the rank that stopped reading: %v", err)
			}
		})
	}
}

// TestBadSegment: a segment whose header announces more slots than the
// file holds is refused.
func TestBadSegment(t *testing.T) {
	mem := make([]byte, hdrSize+4*64)
	binary.LittleEndian.PutUint64(mem[offMagic:], magic)
	binary.LittleEndian.PutUint32(mem[offVersion:], version)
	binary.LittleEndian.PutUint32(mem[offSlotSize:], 64)
	binary.LittleEndian.PutUint32(mem[offSlots:], 4)
	if err := checkHeader(mem); err != nil {
		t.Fatalf("good header refused: %v", err)
	}
	binary.LittleEndian.PutUint32(mem[offSlots:], 5)
	if checkHeader(mem) == nil {
		t.Fatal("header announcing 5 slots in room for 4 accepted")
	}
	binary.LittleEndian.PutUint32(mem[offSlots:], 4)
	binary.LittleEndian.PutUint32(mem[offSlotSize:], 60)
	if checkHeader(mem) == nil {
		t.Fatal("unaligned slot size accepted")
	}
}

// TestIdleParks: once nothing is sent, each drainer leaves its spin and
// parks on the futex (says so in the segment), and a message still wakes
// it.
func TestIdleParks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps := pair(t, Config{})
	for ctx.Err() == nil && (eps[0].peers[1].in.readerSleep.Load() == 0 || eps[1].peers[0].in.readerSleep.Load() == 0) {
		time.Sleep(time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatal("an idle drainer never parked")
	}
	got := make([]byte, 2)
	r := eps[1].Irecv(0, 1, got)
	if err := eps[0].Isend(1, 1, []byte("hi")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil || string(got) != "hi" {
		t.Fatalf("%q %v", got, err)
	}
}

// TestCMA: a large message is pulled by the receiver (one copy), posted
// first or not, and Stats and LargePath say so.
func TestCMA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps := pair(t, Config{})
	if got := eps[0].LargePath(1); got != "cma" {
		t.Fatalf("LargePath = %q before any send", got)
	}
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 31)
	}
	for _, posted := range []bool{true, false} {
		if got := sendRecv(ctx, t, eps, 1, want, posted); string(got) != string(want) {
			t.Fatalf("posted=%v: payload differs", posted)
		}
	}
	if st := eps[0].Stats(); st.CMASends != 2 || st.CopySends != 0 {
		t.Fatalf("sender stats %+v, want 2 CMA sends", st)
	}
	if st := eps[1].Stats(); st.CMARecvs != 2 {
		t.Fatalf("receiver stats %+v, want 2 CMA receives", st)
	}
	if got := eps[0].LargePath(1); got != "cma" {
		t.Fatalf("LargePath = %q", got)
	}
}

// TestDefaultRings: a small job's rings are 1 MiB of slots and hold a
// 512 KiB message; a larger job's have half as many slots; RingBytes
// says what a ring takes.
func TestDefaultRings(t *testing.T) {
	eps := pair(t, Config{})
	r := eps[0].peers[1].out
	if len(r.mem) != RingBytes(2) || RingBytes(2) != 4096+128*8192 {
		t.Fatalf("ring of %d bytes, RingBytes(2) = %d", len(r.mem), RingBytes(2))
	}
	if r.slotsFor(512<<10) > r.slots-2 {
		t.Fatalf("a 512 KiB message takes %d of %d slots", r.slotsFor(512<<10), r.slots)
	}
	if RingBytes(SmallJob) != RingBytes(2) || RingBytes(SmallJob+1) != 4096+64*8192 {
		t.Fatalf("RingBytes(%d) = %d, RingBytes(%d) = %d", SmallJob, RingBytes(SmallJob), SmallJob+1, RingBytes(SmallJob+1))
	}
	c := Config{Rank: 0, Size: SmallJob + 1}
	if err := c.fill(); err != nil || c.Slots != DefaultSlots/2 {
		t.Fatalf("fill: %v, %d slots", err, c.Slots)
	}
}

// TestCMAOnlyWhenNotFitting: a message of CMAThreshold bytes or more
// that fits in the ring's free slots is copied in by Isend; one that does
// not is pulled. Both arrive intact, posted first or not.
func TestCMAOnlyWhenNotFitting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Rings of 16 slots of 8 KiB hold 16*(8192-32) = 130,560 bytes.
	eps := pair(t, Config{Slots: 16, CMAThreshold: 32 << 10})
	for _, tc := range []struct {
		n   int
		cma bool
	}{{32 << 10, false}, {130560, false}, {130561, true}, {1 << 20, true}} {
		for i, posted := range []bool{true, false} {
			before := eps[0].Stats()
			want := make([]byte, tc.n)
			for i := range want {
				want[i] = byte(i*13 + tc.n)
			}
			// A tag of its own for each message: the stream rule
			// (TestStreamGoesByCMA) is not what this test is about.
			tag := transport.Tag(tc.n*2 + i)
			if got := sendRecv(ctx, t, eps, tag, want, posted); string(got) != string(want) {
				t.Fatalf("%d bytes, posted=%v: payload differs", tc.n, posted)
			}
			after := eps[0].Stats()
			cma, cp := after.CMASends-before.CMASends, after.CopySends-before.CopySends
			if tc.cma && (cma != 1 || cp != 0) || !tc.cma && (cma != 0 || cp != 1) {
				t.Fatalf("%d bytes, posted=%v: %d CMA sends and %d copies, want CMA %v", tc.n, posted, cma, cp, tc.cma)
			}
		}
	}
}

// TestCMADescriptorFromIsend: a message that goes by CMA has its
// descriptor in the ring when Isend returns, with no help from the sender
// goroutine: under GOMAXPROCS 1 (a rank bound to one core) that goroutine
// ran only once the caller let go of the processor, and the peer waited
// to pull meanwhile. The peer's pull then completes the send.
func TestCMADescriptorFromIsend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps := pair(t, Config{Slots: 16}) // 128 KiB rings: the message does not fit
	want := make([]byte, 300<<10)
	for i := range want {
		want[i] = byte(i * 11)
	}
	out := eps[0].peers[1].out
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	before := out.head.Load()
	r := eps[0].Isend(1, 7, want)
	if got := out.head.Load(); got != before+1 {
		t.Fatalf("the ring's head is %d when Isend returns, want %d: the descriptor is not out", got, before+1)
	}
	got := make([]byte, len(want))
	if err := eps[1].Irecv(0, 7, got).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("payload differs")
	}
	if st := eps[0].Stats(); st.CMASends != 1 || st.CopySends != 0 {
		t.Fatalf("sender stats %+v, want 1 CMA send", st)
	}
}

// TestStreamGoesByCMA: the first copyFirst large messages under one tag
// that fit in the ring are copied, the rest go by CMA (a collective that
// streams its data in segments), and a new tag starts again with copies.
func TestStreamGoesByCMA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps := pair(t, Config{Slots: 16, CMAThreshold: 32 << 10}) // rings hold 130,560 bytes
	want := make([]byte, 64<<10)
	for i := range want {
		want[i] = byte(i * 17)
	}
	for _, step := range []struct {
		tag       transport.Tag
		sends     int
		cma, copy uint64
	}{
		{tag: 7, sends: copyFirst + 2, cma: 2, copy: copyFirst},
		{tag: 8, sends: 1, copy: 1},
		{tag: 7, sends: 1, copy: 1}, // tag 7 again, after another: a new stream
	} {
		before := eps[0].Stats()
		for range step.sends {
			if got := sendRecv(ctx, t, eps, step.tag, want, true); string(got) != string(want) {
				t.Fatalf("tag %d: payload differs", step.tag)
			}
		}
		after := eps[0].Stats()
		if cma, cp := after.CMASends-before.CMASends, after.CopySends-before.CopySends; cma != step.cma || cp != step.copy {
			t.Errorf("%d sends under tag %d: %d by CMA and %d copied, want %d and %d", step.sends, step.tag, cma, cp, step.cma, step.copy)
		}
	}
}

// refuse is a process_vm_readv that the kernel refuses, as under a strict
// ptrace scope.
func refuse(int, []unix.Iovec, []unix.RemoteIovec, uint) (int, error) { return 0, unix.EPERM }

// TestCMARefused: where process_vm_readv is refused, large messages fall
// back to copies through the ring, and LargePath says "copy".
func TestCMARefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps := pair(t, Config{readv: refuse, Slots: 16}) // 128 KiB rings: the messages do not fit
	want := make([]byte, 300<<10)
	for i := range want {
		want[i] = byte(i * 7)
	}
	for range 2 {
		got := make([]byte, len(want))
		r := eps[1].Irecv(0, 1, got)
		if err := eps[0].Isend(1, 1, want).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatal("payload differs")
		}
	}
	if got := eps[0].LargePath(1); got != "copy" {
		t.Fatalf("LargePath = %q after a refusal", got)
	}
	if st := eps[1].Stats(); st.CMARefused != 1 || st.CMARecvs != 0 {
		t.Fatalf("receiver stats %+v, want one refusal", st)
	}
	if st := eps[0].Stats(); st.CMASends != 0 || st.CopySends != 2 {
		t.Fatalf("sender stats %+v, want 2 copies", st)
	}
}

// TestConformanceCMARefused runs the suite where every process_vm_readv
// is refused.
func TestConformanceCMARefused(t *testing.T) {
	n := 0
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eps := make([]transport.Endpoint, size)
		errs := make([]error, size)
		nonce := fmt.Sprintf("%d-%d", n, time.Now().UnixNano())
		var wg sync.WaitGroup
		for i := range size {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ep *Endpoint
				ep, errs[i] = Connect(ctx, Config{Rank: i, Size: size, JobID: "refused", Nonce: nonce, readv: refuse})
				if ep != nil {
					eps[i] = ep
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return eps
	})
}

// sendRecv sends want from eps[0] to eps[1] under tag 1, with the receive
// posted before the send or after it, and returns what arrived.
func sendRecv(ctx context.Context, t *testing.T, eps [2]*Endpoint, tag transport.Tag, want []byte, posted bool) []byte {
	t.Helper()
	got := make([]byte, len(want))
	var r, s transport.Request
	if posted {
		r = eps[1].Irecv(0, tag, got)
		s = eps[0].Isend(1, tag, want)
	} else {
		s = eps[0].Isend(1, tag, want)
		r = eps[1].Irecv(0, tag, got)
	}
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSegmentBytes: an endpoint whose large messages go by CMA asks for
// PullSegmentBytes to every peer, none for itself, and none where CMA is
// off.
func TestSegmentBytes(t *testing.T) {
	eps := pair(t, Config{})
	if got := eps[0].SegmentBytes(1); got != PullSegmentBytes {
		t.Errorf("SegmentBytes(1) = %d, want %d", got, PullSegmentBytes)
	}
	for _, peer := range []int{0, 2, -1} {
		if got := eps[0].SegmentBytes(peer); got != 0 {
			t.Errorf("SegmentBytes(%d) = %d, want 0", peer, got)
		}
	}
	off := pair(t, Config{CMAThreshold: -1})
	if got := off[0].SegmentBytes(1); got != 0 {
		t.Errorf("CMA off: SegmentBytes(1) = %d, want 0", got)
	}
}

// TestHelp: with Config.Help a caller that waits on a receive takes the
// peer's messages whose slots are all published off the ring itself, and
// leaves the rest (one still being written, a pulled one) to the drainer;
// every message arrives whole and in order, both ways at once, posted
// before it comes or not, with the waits of a core a rank and of more
// ranks than cores.
func TestHelp(t *testing.T) {
	for _, yield := range []bool{false, true} {
		for _, standBack := range []bool{false, true} {
			t.Run(fmt.Sprintf("yield=%v/standback=%v", yield, standBack), func(t *testing.T) { testHelp(t, yield, standBack) })
		}
	}
}

func testHelp(t *testing.T, yield, standBack bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const spin = 10 * time.Millisecond
	eps := pair(t, Config{SlotSize: 256, Slots: 8, Spin: spin, Yield: yield, Help: true, StandBack: standBack, CMAThreshold: 4096})
	// One slot holds 256-slotHdrSize bytes: 8 and 100 bytes fit, 1000
	// takes several slots (in 8, a writer may wait for room), 8192 is
	// pulled. Every 50th message is sent late, after the receiver's
	// helper has given up polling and parked: with StandBack the drainer
	// then delivers it within its shortest sleep.
	sizes := []int{8, 100, 8, 1000, 8, 8192, 100}
	const rounds = 300
	msg := func(from, i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(from*7 + i + j)
		}
		return b
	}
	var wg sync.WaitGroup
	for me := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep, peer := eps[me], 1-me
			for i := range rounds {
				n := sizes[i%len(sizes)]
				got := make([]byte, n)
				var r transport.Request
				if i%3 != 0 { // else posted after the message may have come
					r = ep.Irecv(peer, transport.Tag(i), got)
				}
				if i%50 == 49 {
					time.Sleep(spin + spin/2)
				}
				if err := ep.Isend(peer, transport.Tag(i), msg(me, i, n)).Wait(ctx); err != nil {
					t.Errorf("rank %d send %d: %v", me, i, err)
					return
				}
				if r == nil {
					r = ep.Irecv(peer, transport.Tag(i), got)
				}
				if err := r.Wait(ctx); err != nil {
					t.Errorf("rank %d receive %d: %v", me, i, err)
					return
				}
				if want := msg(peer, i, n); string(got) != string(want) {
					t.Errorf("rank %d: message %d of %d bytes differs", me, i, n)
					return
				}
				if rr, ok := r.(transport.Releaser); ok {
					rr.Release()
				}
			}
		}()
	}
	wg.Wait()
	helped := eps[0].peers[1].helped.Load() + eps[1].peers[0].helped.Load()
	if helped == 0 {
		t.Error("no caller took a message off the ring itself")
	}
	t.Logf("callers took %d of %d messages", helped, 2*rounds)
}
