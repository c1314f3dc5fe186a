//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// Segment layout: a header page of 64-byte lines, then the slots. See doc.go.
const (
	magic   = 0x676f63636c73686d // "gocclshm"
	version = 3                  // 2: a descriptor's state word (cmaState), revocable by its writer; 3: vectored descriptors (kindCMAV)

	hdrSize = 4096 // the slots start on the second page

	offMagic     = 0  // uint64
	offVersion   = 8  // uint32
	offSlotSize  = 12 // uint32
	offSlots     = 16 // uint32
	offWriterPid = 20 // int32, set by the creator (the writer)
	offReaderPid = 24 // int32, set by the reader when it maps the segment
	offReady     = 28 // uint32, stored last by the creator

	offHead        = 1 * 64 // uint64: slots published, written by the writer only
	offTail        = 2 * 64 // uint64: slots consumed, written by the reader only
	offDataSeq     = 3 * 64 // uint32 futex word the reader parks on
	offReaderSleep = 3*64 + 4
	offSpaceSeq    = 4 * 64 // uint32 futex word the writer parks on
	offWriterSleep = 4*64 + 4
	offWriterGone  = 5 * 64 // uint32: the writer closed on purpose (goodbye)
	offReaderGone  = 6 * 64 // uint32: the reader closed on purpose
	offCMAState    = 7 * 64 // uint64: the last descriptor's number<<3 | its state; both sides CAS it

	slotHdrSize = 32

	kindFirst = 1 // the first slot of a message
	kindCont  = 2 // a continuation slot
	kindCMA   = 3 // a descriptor: the reader pulls the message with process_vm_readv
	kindCMAV  = 4 // a descriptor of several buffers (a vectored send), pulled as one message

	cmaDescSize = 8  // a kindCMA slot's payload: the sender's buffer address
	cmaIovSize  = 16 // a kindCMAV slot's payload: per buffer, its address and length

	// The states of a descriptor in cmaState (doc.go, "Revoking a
	// descriptor"). The writer stores published; the reader moves it to
	// pulling with a CAS before it reads the writer's memory, and then
	// to pulled or refused with a CAS; the writer moves published or
	// pulling to revoked with a CAS when it gives up on the message.
	cmaPublished = 1
	cmaPulling   = 2
	cmaPulled    = 3 // the reader copied the message (or failed to: a protocol error)
	cmaRefused   = 4 // the kernel refused the reader: the message follows through the ring
	cmaRevoked   = 5 // the writer took its buffer back: the reader must not use what it read
	cmaStateBits = 3
)

// slotHdr is the parsed header of a slot.
type slotHdr struct {
	kind  uint32
	chunk uint32 // payload bytes in this slot
	tag   transport.Tag
	total uint64 // message length (first slot only)
}

// parseSlot parses and checks a slot header that a peer wrote. payloadCap
// is the most payload a slot holds, maxMsg the largest message accepted.
// left is how many bytes of the current message are still to come (0 when
// a new message must start). It never reads past the first slotHdrSize
// bytes of b and never panics.
func parseSlot(b []byte, payloadCap uint32, maxMsg uint64, left uint64) (slotHdr, error) {
	if len(b) < slotHdrSize {
		return slotHdr{}, fmt.Errorf("%w: slot header of %d bytes", transport.ErrProtocol, len(b))
	}
	h := slotHdr{
		kind:  binary.LittleEndian.Uint32(b[0:]),
		chunk: binary.LittleEndian.Uint32(b[4:]),
		tag:   transport.Tag(binary.LittleEndian.Uint64(b[8:])),
		total: binary.LittleEndian.Uint64(b[16:]),
	}
	if h.chunk > payloadCap {
		return slotHdr{}, fmt.Errorf("%w: slot payload of %d bytes, slots hold %d", transport.ErrProtocol, h.chunk, payloadCap)
	}
	switch h.kind {
	case kindFirst:
		if left != 0 {
			return slotHdr{}, fmt.Errorf("%w: new message while %d bytes of the last are missing", transport.ErrProtocol, left)
		}
		if h.total > maxMsg {
			return slotHdr{}, fmt.Errorf("%w: message of %d bytes exceeds MaxMessage %d", transport.ErrProtocol, h.total, maxMsg)
		}
		if uint64(h.chunk) != min(h.total, uint64(payloadCap)) {
			return slotHdr{}, fmt.Errorf("%w: first slot of a %d-byte message holds %d bytes", transport.ErrProtocol, h.total, h.chunk)
		}
	case kindCont:
		if left == 0 {
			return slotHdr{}, fmt.Errorf("%w: continuation slot outside a message", transport.ErrProtocol)
		}
		if uint64(h.chunk) != min(left, uint64(payloadCap)) {
			return slotHdr{}, fmt.Errorf("%w: continuation slot holds %d bytes, %d expected", transport.ErrProtocol, h.chunk, min(left, uint64(payloadCap)))
		}
	case kindCMA:
		if left != 0 {
			return slotHdr{}, fmt.Errorf("%w: new message while %d bytes of the last are missing", transport.ErrProtocol, left)
		}
		if h.total > maxMsg {
			return slotHdr{}, fmt.Errorf("%w: message of %d bytes exceeds MaxMessage %d", transport.ErrProtocol, h.total, maxMsg)
		}
		if h.chunk != cmaDescSize || h.total == 0 {
			return slotHdr{}, fmt.Errorf("%w: cma descriptor of %d bytes for %d bytes", transport.ErrProtocol, h.chunk, h.total)
		}
	case kindCMAV:
		if left != 0 {
			return slotHdr{}, fmt.Errorf("%w: new message while %d bytes of the last are missing", transport.ErrProtocol, left)
		}
		if h.total > maxMsg {
			return slotHdr{}, fmt.Errorf("%w: message of %d bytes exceeds MaxMessage %d", transport.ErrProtocol, h.total, maxMsg)
		}
		if h.chunk == 0 || h.chunk%cmaIovSize != 0 || h.chunk/cmaIovSize > maxPullIov || h.total == 0 {
			return slotHdr{}, fmt.Errorf("%w: cma descriptor of %d bytes for %d bytes", transport.ErrProtocol, h.chunk, h.total)
		}
	default:
		return slotHdr{}, fmt.Errorf("%w: slot kind %d", transport.ErrProtocol, h.kind)
	}
	return h, nil
}

func putSlot(b []byte, h slotHdr) {
	binary.LittleEndian.PutUint32(b[0:], h.kind)
	binary.LittleEndian.PutUint32(b[4:], h.chunk)
	binary.LittleEndian.PutUint64(b[8:], uint64(h.tag))
	binary.LittleEndian.PutUint64(b[16:], h.total)
}

// ring is one mapping of a segment: the writer's or the reader's view.
type ring struct {
	mem      []byte
	slotSize uint64
	slots    uint64
	cap      uint32 // payload bytes per slot

	head, tail             *atomic.Uint64
	dataSeq, readerSleep   *atomic.Uint32
	spaceSeq, writerSleep  *atomic.Uint32
	writerGone, readerGone *atomic.Uint32
	cmaState               *atomic.Uint64
	writerPid              int
	cmaSeq                 uint64 // descriptors written (writer) or handled (reader)

	pos uint64 // local head (writer) or tail (reader)

	// Reader only: the current slot.
	hdrBuf    [slotHdrSize]byte
	chunkOff  int    // payload offset in mem
	chunkLeft int    // payload bytes not yet copied out
	msgLeft   uint64 // message bytes after the current slot
	held      bool   // the current slot is not released yet

	// A ring's fields are one side's (the writer's or the reader's),
	// and a peer's two rings are allocated together: the padding keeps
	// one's last line from being the other's first.
	_ cpu.CacheLinePad
}

func u64(mem []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[off])) }
func u32(mem []byte, off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }

func newRing(mem []byte) *ring {
	r := &ring{mem: mem}
	r.slotSize = uint64(binary.LittleEndian.Uint32(mem[offSlotSize:]))
	r.slots = uint64(binary.LittleEndian.Uint32(mem[offSlots:]))
	r.cap = uint32(r.slotSize - slotHdrSize)
	r.head, r.tail = u64(mem, offHead), u64(mem, offTail)
	r.dataSeq, r.readerSleep = u32(mem, offDataSeq), u32(mem, offReaderSleep)
	r.spaceSeq, r.writerSleep = u32(mem, offSpaceSeq), u32(mem, offWriterSleep)
	r.writerGone, r.readerGone = u32(mem, offWriterGone), u32(mem, offReaderGone)
	r.cmaState = u64(mem, offCMAState)
	r.writerPid = int(int32(binary.LittleEndian.Uint32(mem[offWriterPid:])))
	return r
}

// cmaWord is the value of cmaState for descriptor k in state st.
func cmaWord(k uint64, st uint64) uint64 { return k<<cmaStateBits | st }

// cmaClaim is the reader's first step on descriptor k: it moves it from
// published to pulling, after which it may read the writer's memory. It
// returns nil, errRevoked if the writer took it back first, or a protocol
// error if the word holds anything else.
func cmaClaim(w *atomic.Uint64, k uint64) error {
	if w.CompareAndSwap(cmaWord(k, cmaPublished), cmaWord(k, cmaPulling)) {
		return nil
	}
	if v := w.Load(); v != cmaWord(k, cmaRevoked) {
		return fmt.Errorf("%w: cma descriptor %d in state %d of descriptor %d", transport.ErrProtocol, k, v&(1<<cmaStateBits-1), v>>cmaStateBits)
	}
	return errRevoked
}

// cmaFinish is the reader's last step on descriptor k, which it claimed:
// it moves it from pulling to st (cmaPulled or cmaRefused) and reports
// whether it did. False: the writer revoked it meanwhile, and what the
// reader copied may not be what was sent; it must be dropped.
func cmaFinish(w *atomic.Uint64, k uint64, st uint64) bool {
	return w.CompareAndSwap(cmaWord(k, cmaPulling), cmaWord(k, st))
}

// cmaRevoke is the writer giving up on descriptor k: it moves it from
// published or pulling to revoked, and returns cmaRevoked if it did (no
// byte the reader copies counts from then on, and the buffer is the
// caller's again), else the state the reader ended it in (cmaPulled or
// cmaRefused: the reader won).
func cmaRevoke(w *atomic.Uint64, k uint64) uint64 {
	for {
		v := w.Load()
		if v != cmaWord(k, cmaPublished) && v != cmaWord(k, cmaPulling) {
			return v & (1<<cmaStateBits - 1)
		}
		if w.CompareAndSwap(v, cmaWord(k, cmaRevoked)) {
			return cmaRevoked
		}
	}
}

// cmaEnded reports whether the reader has ended descriptor k (pulled or
// refused).
func cmaEnded(w *atomic.Uint64, k uint64) bool {
	v := w.Load()
	return v == cmaWord(k, cmaPulled) || v == cmaWord(k, cmaRefused)
}

// errRevoked: the writer of a ring revoked the descriptor the reader was
// about to pull, or was pulling. A writer revokes only when it can no
// longer wait (it closes, or its link failed), so for the reader this is
// the peer leaving, in the middle of a message.
var errRevoked = errors.New("closed while its message was being pulled (the descriptor was revoked)")

// slot returns the bytes of slot number i (counted from 0 since the start).
func (r *ring) slot(i uint64) []byte {
	off := hdrSize + (i%r.slots)*r.slotSize
	return r.mem[off : off+r.slotSize : off+r.slotSize]
}

// Futex operations on a word of a shared mapping (not FUTEX_PRIVATE: the
// waiter and the waker are different mappings, often different processes).
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// parkLimit bounds one FUTEX_WAIT: a safety net only, every wake-up that
// matters is explicit.
const parkLimit = time.Second

func futexWait(w *atomic.Uint32, val uint32) { futexWaitFor(w, val, parkLimit) }

// futexWaitFor sleeps while *w == val, for at most d.
func futexWaitFor(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, 1<<30, 0, 0, 0)
}

// kick bumps a futex word and wakes its waiters.
func kick(w *atomic.Uint32) {
	w.Add(1)
	futexWake(w)
}

// spinFor polls until ready returns true or d has passed, yielding the
// processor between rounds of polls: to the process's goroutines, or with
// yield to any runnable thread (Config.Yield).
func spinFor(d time.Duration, yield bool, ready func() bool) bool {
	if d <= 0 {
		return ready()
	}
	var start time.Time
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i&7 == 7 {
			// Let the goroutines this one readied run: a receiver woken by
			// a delivery waits in this P's run queue, not on another core.
			runtime.Gosched()
			if yield { // and the core too (transport.Spinner.Pass)
				transport.OSYield()
			}
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > d {
				return false
			}
		}
	}
}

// park waits on seq until ready returns true: it announces itself in
// sleep, re-checks ready, and only then sleeps, so a waker that publishes
// and then sees sleep set (sequentially consistent atomics) never loses
// the wake-up.
func park(seq, sleep *atomic.Uint32, ready func() bool) {
	for {
		v := seq.Load()
		sleep.Store(1)
		if ready() {
			sleep.Store(0)
			return
		}
		futexWait(seq, v)
		sleep.Store(0)
		if ready() {
			return
		}
	}
}

var errCorruptIndex = errors.New("ring index out of range")
