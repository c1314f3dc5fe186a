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

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// Segment layout: a header page of 64-byte lines, then the slots. See doc.go.
const (
	magic   = 0x676f63636c73686d // "gocclshm"
	version = 1

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
	offCMADone     = 7 * 64 // uint64: cma descriptors handled, written by the reader
	offCMAStatus   = 7*64 + 8

	slotHdrSize = 32

	kindFirst = 1 // the first slot of a message
	kindCont  = 2 // a continuation slot
	kindCMA   = 3 // a descriptor: the reader pulls the message with process_vm_readv

	cmaDescSize = 8 // a kindCMA slot's payload: the sender's buffer address

	cmaOK      = 0 // offCMAStatus: the reader copied the message
	cmaRefused = 1 // the kernel refused the reader: the message follows through the ring
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
	cmaDone                *atomic.Uint64
	cmaStatus              *atomic.Uint32
	writerPid              int
	cmaSeq                 uint64 // descriptors written (writer) or handled (reader)

	pos uint64 // local head (writer) or tail (reader)

	// Reader only: the current slot.
	hdrBuf    [slotHdrSize]byte
	chunkOff  int    // payload offset in mem
	chunkLeft int    // payload bytes not yet copied out
	msgLeft   uint64 // message bytes after the current slot
	held      bool   // the current slot is not released yet
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
	r.cmaDone, r.cmaStatus = u64(mem, offCMADone), u32(mem, offCMAStatus)
	r.writerPid = int(int32(binary.LittleEndian.Uint32(mem[offWriterPid:])))
	return r
}

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
// processor between rounds of polls.
func spinFor(d time.Duration, ready func() bool) bool {
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
