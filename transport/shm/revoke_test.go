//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// The tests of the descriptor's state word (doc.go, "Revoking a
// descriptor") drive both sides of one ring directly: a writer peer that
// publishes and awaits or revokes, and a reader peer that pulls, over one
// segment in this process's memory (process_vm_readv of one's own
// process works). None of them asserts a time.

// revokeRing returns a writer peer and a reader peer over one fresh
// segment; readv, if not nil, replaces process_vm_readv for the reader.
func revokeRing(t *testing.T, readv func(int, []unix.Iovec, []unix.RemoteIovec, uint) (int, error)) (w, r *peer) {
	t.Helper()
	const slotSize, slots = 512, 16
	mem := make([]byte, hdrSize+slots*slotSize)
	binary.LittleEndian.PutUint64(mem[offMagic:], magic)
	binary.LittleEndian.PutUint32(mem[offVersion:], version)
	binary.LittleEndian.PutUint32(mem[offSlotSize:], slotSize)
	binary.LittleEndian.PutUint32(mem[offSlots:], slots)
	binary.LittleEndian.PutUint32(mem[offWriterPid:], uint32(os.Getpid()))
	if err := checkHeader(mem); err != nil {
		t.Fatal(err)
	}
	if readv == nil {
		readv = unix.ProcessVMReadv
	}
	we := &Endpoint{cfg: Config{Rank: 0, Size: 2, Spin: -1, CMAThreshold: 1}, done: make(chan struct{})}
	re := &Endpoint{cfg: Config{Rank: 1, Size: 2, Spin: -1, readv: readv}, m: transport.NewMatcher(2), done: make(chan struct{}), maxMsg: 1 << 30}
	w = &peer{e: we, rank: 1, out: newRing(mem), pidfd: -1}
	r = &peer{e: re, rank: 0, in: newRing(mem), pidfd: -1, pid: os.Getpid()}
	t.Cleanup(func() { runtimeKeep(mem) })
	return w, r
}

//go:noinline
func runtimeKeep(b []byte) { _ = b }

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func state(ring *ring) uint64 { return ring.cmaState.Load() & (1<<cmaStateBits - 1) }

// TestRevokeBeforePull: the writer gives up (its endpoint closes) before
// the reader comes to the descriptor. The revoke wins: the send ends
// with ErrClosed at once, and the reader then skips the descriptor
// without reading the writer's memory, leaving the posted receive alone
// (the drain ends, and the receive fails as from a peer that left).
func TestRevokeBeforePull(t *testing.T) {
	var reads atomic.Int32
	w, r := revokeRing(t, func(pid int, l []unix.Iovec, rm []unix.RemoteIovec, f uint) (int, error) {
		reads.Add(1)
		return unix.ProcessVMReadv(pid, l, rm, f)
	})
	b := pattern(4096, 1)
	k := w.publishCMA(7, payload{one: b}, len(b))
	w.e.closing.Store(true)
	refused, err := w.awaitPull(payload{one: b}, k)
	if refused || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("awaitPull = %v, %v; want ErrClosed", refused, err)
	}
	if st := state(w.out); st != cmaRevoked {
		t.Fatalf("state %d after the revoke, want %d", st, cmaRevoked)
	}
	got := make([]byte, len(b))
	rq := r.e.m.Post(0, 7, got)
	if err := r.pullAt(7, len(b), addrOf(b)); !errors.Is(err, errRevoked) {
		t.Fatalf("pull = %v, want errRevoked", err)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("the reader read the writer's memory %d times after the revoke", n)
	}
	select {
	case <-rq.Done():
		t.Fatalf("the receive completed (%v); the skipped descriptor must not touch it", rq.Err())
	default:
	}
	if !bytes.Equal(got, make([]byte, len(got))) {
		t.Fatal("bytes landed in the receive")
	}
	if pe := r.recvErr(errRevoked).(*transport.PeerError); !errors.Is(pe, transport.ErrPeerClosed) || pe.Peer != 0 {
		t.Fatalf("the receives fail with %v, want a PeerError naming 0 wrapping ErrPeerClosed", pe)
	}
}

// TestPullBeforeRevoke: the reader ends the pull before the writer gives
// up. The revoke loses: the writer takes the pull's outcome, and the
// message was delivered.
func TestPullBeforeRevoke(t *testing.T) {
	w, r := revokeRing(t, nil)
	b := pattern(4096, 2)
	k := w.publishCMA(7, payload{one: b}, len(b))
	got := make([]byte, len(b))
	rq := r.e.m.Post(0, 7, got)
	if err := r.pullAt(7, len(b), addrOf(b)); err != nil {
		t.Fatal(err)
	}
	if err := rq.Wait(context.Background()); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("receive: %v, equal %v", err, bytes.Equal(got, b))
	}
	if st := cmaRevoke(w.out.cmaState, k); st != cmaPulled {
		t.Fatalf("cmaRevoke after the pull = %d, want %d (the pull won)", st, cmaPulled)
	}
	w.e.closing.Store(true)
	if refused, err := w.awaitPull(payload{one: b}, k); refused || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("awaitPull on a closing endpoint = %v, %v", refused, err)
	}
	if st := state(w.out); st != cmaPulled {
		t.Fatalf("state %d, want %d", st, cmaPulled)
	}
	if s := w.e.Stats(); s.CMASends != 1 {
		t.Fatalf("sender stats %+v, want the message counted as pulled", s)
	}
}

// TestRevokeDuringPull: the reader claimed the descriptor and is inside
// process_vm_readv (here: held there, as a peer stopped mid-pull would
// leave it) when the writer gives up. The writer does not wait for it:
// the revoke wins over a pull in progress, the send ends, and the writer
// overwrites its buffer. When the reader comes back its final CAS fails,
// so it drops what it copied and fails the receive.
func TestRevokeDuringPull(t *testing.T) {
	in, out := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	w, r := revokeRing(t, func(pid int, l []unix.Iovec, rm []unix.RemoteIovec, f uint) (int, error) {
		n, err := unix.ProcessVMReadv(pid, l, rm, f)
		if calls.Add(1) == 2 { // the probe is the first
			close(in)
			<-out
		}
		return n, err
	})
	b := pattern(8192, 3)
	k := w.publishCMA(7, payload{one: b}, len(b))
	got := make([]byte, len(b))
	rq := r.e.m.Post(0, 7, got)
	pulled := make(chan error, 1)
	go func() { pulled <- r.pullAt(7, len(b), addrOf(b)) }()
	<-in
	if st := state(w.out); st != cmaPulling {
		t.Fatalf("state %d during the pull, want %d", st, cmaPulling)
	}
	w.e.closing.Store(true)
	if refused, err := w.awaitPull(payload{one: b}, k); refused || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("awaitPull = %v, %v; want ErrClosed", refused, err)
	}
	copy(b, make([]byte, len(b))) // the caller has its buffer back
	close(out)
	if err := <-pulled; !errors.Is(err, errRevoked) {
		t.Fatalf("pull = %v, want errRevoked", err)
	}
	if err := rq.Wait(context.Background()); !errors.Is(err, transport.ErrPeerClosed) || !errors.Is(err, errRevoked) {
		t.Fatalf("receive = %v, want it failed with ErrPeerClosed and errRevoked", err)
	}
	if s := r.e.Stats(); s.CMARecvs != 0 {
		t.Fatalf("receiver stats %+v: a dropped pull counted", s)
	}
}

// TestRevokeRace runs the reader's pull and the writer's giving up at
// once, many times: exactly one wins each time. When the revoke wins the
// receive never succeeds (it is left alone, or fails); when the pull
// wins the receive holds the message and the writer saw it pulled.
func TestRevokeRace(t *testing.T) {
	w, r := revokeRing(t, nil)
	w.e.closing.Store(true) // awaitPull revokes unless the pull has ended
	n := 2000
	if testing.Short() {
		n = 200
	}
	var revoked, pulled int
	for i := range n {
		tag := transport.Tag(100 + i)
		b := pattern(1024+i%4096, byte(i))
		k := w.publishCMA(tag, payload{one: b}, len(b))
		got := make([]byte, len(b))
		rq := r.e.m.Post(0, tag, got)
		var wg sync.WaitGroup
		var perr, werr error
		wg.Add(2)
		go func() { defer wg.Done(); perr = r.pullAt(tag, len(b), addrOf(b)) }()
		go func() {
			defer wg.Done()
			for range i % 5 { // vary who comes first
				runtime.Gosched()
			}
			_, werr = w.awaitPull(payload{one: b}, k)
		}()
		wg.Wait()
		if !errors.Is(werr, transport.ErrClosed) {
			t.Fatalf("iteration %d: awaitPull = %v", i, werr)
		}
		switch st := state(w.out); st {
		case cmaRevoked:
			revoked++
			if !errors.Is(perr, errRevoked) {
				t.Fatalf("iteration %d: revoked, but the pull returned %v", i, perr)
			}
			select {
			case <-rq.Done():
				if rq.Err() == nil {
					t.Fatalf("iteration %d: revoked, but the receive succeeded", i)
				}
			default:
			}
			// The drain would end here; go on with the next descriptor
			// as a fresh one.
		case cmaPulled:
			pulled++
			if perr != nil {
				t.Fatalf("iteration %d: pulled, but the pull returned %v", i, perr)
			}
			if err := rq.Wait(context.Background()); err != nil || !bytes.Equal(got, b) {
				t.Fatalf("iteration %d: pulled, receive %v, equal %v", i, err, bytes.Equal(got, b))
			}
		default:
			t.Fatalf("iteration %d: state %d", i, st)
		}
	}
	t.Logf("%d revoked, %d pulled of %d", revoked, pulled, n)
}

// TestCloseRevokes: an endpoint whose peer claimed a descriptor and then
// never ends the pull (its process_vm_readv is held, as in a peer stopped
// mid-pull) still closes, and the send fails with ErrClosed; the peer's
// receive fails once its pull comes back. (A peer stopped before it
// claims cannot be had with two endpoints in one process, whose drainer
// claims at once: TestRevokeBeforePull covers it at the ring.)
func TestCloseRevokes(t *testing.T) {
	in, out := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	held := func(pid int, l []unix.Iovec, rm []unix.RemoteIovec, f uint) (int, error) {
		n, err := unix.ProcessVMReadv(pid, l, rm, f)
		if calls.Add(1) == 2 {
			close(in)
			<-out
		}
		return n, err
	}
	eps := pair(t, Config{Slots: 16, readv: held}) // 128 KiB rings: 1 MiB goes by CMA
	b := pattern(1<<20, 4)
	got := make([]byte, len(b))
	rq := eps[1].Irecv(0, 9, got)
	sq := eps[0].Isend(1, 9, b)
	<-in
	done := make(chan struct{})
	go func() { eps[0].Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang, not a timing
		close(out)
		t.Fatal("Close waited for a pull that does not end")
	}
	if err := sq.Wait(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("send = %v, want ErrClosed", err)
	}
	close(out)
	if err := rq.Wait(context.Background()); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("receive = %v, want ErrPeerClosed", err)
	}
}

// pullAt pulls the message of n bytes at addr, as the drainer does for a
// descriptor of one buffer.
func (p *peer) pullAt(tag transport.Tag, n int, addr uintptr) error {
	p.riov = append(p.riov[:0], unix.RemoteIovec{Base: addr, Len: n})
	return p.pull(tag, n)
}
