package board

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/internal/clock"
	"github.com/goccl/goccl/internal/cpu"
	"github.com/goccl/goccl/transport"
)

const (
	// Max is the largest payload that runs on the board.
	Max = 1 << 10
	// Line is the cache line that slots and ack lines start on.
	Line = 64
	// FPLen is the length of a call's fingerprint.
	FPLen = 32
	// Polls is how many times a call reads a peer's slot before it waits
	// through the transport (which spins longer, yielding, then parks): a
	// peer that is a few microseconds behind costs no more than the
	// reads. Between two reads the poll relaxes (cpu.Relax, about 20 ns
	// here): a loop of bare reads takes issue slots from a member on the
	// other hardware thread of the core and keeps asking for a line the
	// peer is about to write, and the 8-byte allreduce took 0.66 us
	// instead of 0.57 in BENCHMARKS.md's slow state. Where the transports
	// do not poll (GOCCL_SPIN=0, or more ranks than CPUs) a caller gives
	// New 1: the board reads once.
	Polls = 256

	anns = 8 // announcement entries per member
)

// Within a slot: the sequence number, the payload's length, the
// fingerprint, the payload.
const (
	slotLen     = 8 // the length in the low 16 bits, the ack above
	slotFP      = 16
	slotPayload = slotFP + FPLen
	slotBytes   = (slotPayload + Max + Line - 1) / Line * Line
)

// Size is the size of the block of a board of n members.
func Size(n int) int { return dataOff(n) + 2*n*slotBytes }

func acksOff(n int) int { return n * anns * Line }
func dataOff(n int) int { return acksOff(n) + n*Line }

// Board is one member's side of a group's board. Its methods may be
// called from several goroutines at once, each for its own call.
type Board struct {
	tb    transport.Board
	mem   []byte
	n, me int
	acks  int // offset of the ack lines
	data  int // offset of the slot rows
	polls int // reads of a slot before a wait through the transport
	// known[2m+row]: a call of that row that member m has acked, as
	// m's slots said (learn); at most its ack, never more.
	known []atomic.Uint64
}

// New returns member me's side of the board of n members in tb's block,
// which must hold Size(n) bytes, zeroed before any member used it. polls
// is how many times a call reads a slot before it waits through tb
// (Polls; 1 where nothing should spin).
func New(tb transport.Board, n, me, polls int) (*Board, error) {
	b := new(Board)
	if err := b.Init(tb, n, me, polls); err != nil {
		return nil, err
	}
	return b, nil
}

// Init is New into b, for a caller that holds the Board in a struct of
// its own (no pointer to follow on each call).
func (b *Board) Init(tb transport.Board, n, me, polls int) error {
	mem := tb.Bytes()
	switch {
	case n < 2 || me < 0 || me >= n:
		return fmt.Errorf("board: member %d of %d", me, n)
	case len(mem) < Size(n):
		return fmt.Errorf("board: a block of %d bytes for %d members, want %d", len(mem), n, Size(n))
	case uintptr(unsafe.Pointer(&mem[0]))%Line != 0:
		return fmt.Errorf("board: block not %d-byte aligned", Line)
	}
	*b = Board{tb: tb, mem: mem, n: n, me: me, acks: acksOff(n), data: dataOff(n), polls: max(polls, 1),
		known: lines(2 * n)}
	return nil
}

// lines returns n words in cache lines of their own. known is written
// on every call, by this member alone: in a line that held another
// member's known, or anything another goroutine writes, every write
// would take the line from that core.
func lines(n int) []atomic.Uint64 {
	const words = Line / 8
	w := make([]atomic.Uint64, (n+words-1)/words*words+words) // one line spare
	skip := int(-uintptr(unsafe.Pointer(&w[0])) % Line / 8)
	return w[skip : skip+n : skip+n]
}

// Members is the number of members; Me is this member.
func (b *Board) Members() int { return b.n }

// Me is this member's index.
func (b *Board) Me() int { return b.me }

// Close releases this member's hold on the block.
func (b *Board) Close() error { return b.tb.Close() }

// Call is one call of this member on the board, besides its payload.
// Every field but Started and Hooks is the same on every member for the
// same call. A caller may keep it on its stack: the board keeps nothing
// of it once the call returns. What its pointers (FP, Started, Hooks)
// point to escapes to the heap, as a wait may hand it to another
// goroutine: point them into memory that lives there already (the
// caller's record of the call), or a call allocates.
type Call struct {
	// Seq is the call's sequence number, from 1; its row is Seq mod 2.
	Seq uint64
	// Prev is this member's previous call on the board in Seq's row, 0
	// for none: the slot takes Seq once every member has acked Prev.
	Prev uint64
	// FP is the call's fingerprint, written beside the payload.
	FP *[FPLen]byte
	// Check: compare the peers' fingerprints with FP.
	Check bool
	// Started, if not nil and zero, is set to the time the call
	// published its slot (or began to wait, if it waits first).
	Started *clock.Stamp
	// Hooks, if not nil, hears of the call's waits.
	Hooks Hooks
}

// Hooks are the caller's part in a call's waits, which are the slow
// path: a call whose peers keep pace calls neither.
type Hooks interface {
	// Waiting is called before each wait through the transport, with
	// the member waited on (-1: the acks of several, before the slot is
	// written).
	Waiting(member int)
	// Aborted reports whether the call should stop waiting: the wait
	// then ends with a *WaitError wrapping ErrAborted.
	Aborted() bool
}

func (b *Board) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b.mem[off]))
}

func (b *Board) slotOff(row, m int) int { return b.data + (row*b.n+m)*slotBytes }

func (b *Board) annOff(m int, seq uint64) int {
	return (m*anns + int(seq%anns)) * Line
}

// Announce says that this member's call seq, with fingerprint fp, does
// not run on the board: a peer that waits for its slot of seq fails at
// once (a *MismatchError with Announced) instead of waiting to its
// timeout.
func (b *Board) Announce(seq uint64, fp *[FPLen]byte) {
	off := b.annOff(b.me, seq)
	for i := 0; i < FPLen; i += 8 {
		b.word(off + 8 + i).Store(binary.LittleEndian.Uint64(fp[i:]))
	}
	b.word(off).Store(seq)
	b.tb.Wake()
}

// announced returns member q's fingerprint of its call seq if q announced
// that call (it does not run on the board).
func (b *Board) announced(q int, seq uint64) (fp [FPLen]byte, ok bool) {
	off := b.annOff(q, seq)
	if b.word(off).Load() != seq {
		return fp, false
	}
	for i := 0; i < FPLen; i += 8 {
		binary.LittleEndian.PutUint64(fp[i:], b.word(off+8+i).Load())
	}
	return fp, true // the words may be a later call's: only the message suffers
}

// Post publishes payload (at most Max bytes) as this member's
// contribution to call c and waits until every member's slot holds the
// call. A member's fingerprint that differs from this one's (where
// c.Check), a member that does not run the call on the board, a payload
// of another length, a lost member, an abort or the end of ctx ends it
// with an error. Then the caller reads the slots (Payload) and acks them
// (Ack).
//
// Post stamps c.Started once it has published, and calls c.Hooks.Waiting
// before it waits: a call that finds every slot within its polls reads no
// clock but the stamp's.
func (b *Board) Post(ctx context.Context, c *Call, payload []byte) error {
	seq, prev := c.Seq, c.Prev
	row := int(seq & 1)
	mine := b.slotOff(row, b.me)
	if prev != 0 && !b.free(prev) {
		if err := b.wait(ctx, c.Hooks, seq, c.FP, -1, func() bool { return b.free(prev) }); err != nil {
			return err
		}
	}
	// Plain writes: the store of seq below publishes them.
	binary.LittleEndian.PutUint64(b.mem[mine+slotLen:], uint64(len(payload))|b.ackOf(b.me, 1-row)<<16)
	putFP(b.mem[mine+slotFP:mine+slotPayload], c.FP)
	copy(b.mem[mine+slotPayload:], payload)
	b.word(mine).Store(seq)
	b.tb.Wake()
	if s := c.Started; s != nil && *s == 0 {
		*s = clock.Now()
	}

	for q := 0; q < b.n; q++ {
		if q == b.me {
			continue
		}
		off := b.slotOff(row, q)
		if !b.poll(off, seq) {
			if err := b.wait(ctx, c.Hooks, seq, c.FP, q, func() bool { return b.word(off).Load() == seq }); err != nil {
				return err
			}
		}
		if c.Check && !equalFP(b.mem[off+slotFP:off+slotPayload], c.FP) {
			e := &MismatchError{Member: q, Seq: seq, Mine: *c.FP}
			copy(e.Theirs[:], b.mem[off+slotFP:off+slotPayload])
			return e
		}
		w := b.word(off + slotLen).Load()
		b.learn(q, 1-row, w>>16)
		if got := int(w & 0xffff); got != len(payload) {
			return &LengthError{Member: q, Seq: seq, Got: got, Want: len(payload)}
		}
	}
	return nil
}

// putFP copies f into dst in 8-byte words: the caller made f in 8-byte
// stores, and a wider read of narrower stores that have not reached the
// cache yet waits until they have.
func putFP(dst []byte, f *[FPLen]byte) {
	_ = dst[FPLen-1]
	for i := 0; i < FPLen; i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(f[i:]))
	}
}

// equalFP reports whether b starts with f, comparing 8-byte words.
func equalFP(b []byte, f *[FPLen]byte) bool {
	_ = b[FPLen-1]
	for i := 0; i < FPLen; i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != binary.LittleEndian.Uint64(f[i:]) {
			return false
		}
	}
	return true
}

// poll reads the word at off up to b.polls times for seq.
func (b *Board) poll(off int, seq uint64) bool {
	w := b.word(off)
	for range b.polls {
		if w.Load() == seq {
			return true
		}
		cpu.Relax()
	}
	return false
}

// Payload is member q's payload of n bytes in call seq's row. It holds
// call seq's from Post's return until this member acks seq.
func (b *Board) Payload(seq uint64, q, n int) []byte {
	off := b.slotOff(int(seq&1), q) + slotPayload
	return b.mem[off : off+n]
}

// Ack tells every member that this member has read their slots of call
// seq, which they may then reuse.
func (b *Board) Ack(seq uint64) {
	b.word(b.acks + b.me*Line + 8*int(seq&1)).Store(seq)
	b.tb.Wake()
}

// free reports whether this member's slot in prev's row may take a new
// call: every member has acked prev, this member too (an async call of
// its own may still be reading it). A member acks only a call it has
// posted, so its own ack also says that the slot holds prev; free does
// not read the slot to see. That read would cost a cache miss on every
// call: the peers have just read the slot's line, and the processor may
// have handed it to them (AMD's migratory sharing), so that the read
// fetches it back in a shared state and the write that follows fetches
// it once more, to own it; two transfers of the line where the write
// alone costs one (0.75 to 0.60 us in BENCHMARKS.md's slow state). A
// member's ack line is read only where its slots have not said as much
// already.
func (b *Board) free(prev uint64) bool {
	row := int(prev & 1)
	for m := 0; m < b.n; m++ {
		if m != b.me && b.known[2*m+row].Load() >= prev {
			continue
		}
		ack := b.ackOf(m, row)
		if ack < prev {
			return false
		}
		if m != b.me { // its own ack is never looked up in known
			b.learn(m, row, ack)
		}
	}
	return true
}

// ackOf reads member m's ack of row.
func (b *Board) ackOf(m, row int) uint64 {
	return b.word(b.acks + m*Line + 8*row).Load()
}

// learn notes that member m has acked call ack of row. Two calls that
// learn at once may leave the smaller value: still an ack m made.
func (b *Board) learn(m, row int, ack uint64) {
	if k := &b.known[2*m+row]; ack > k.Load() {
		k.Store(ack)
	}
}

// wait waits until ready, on member q (-1: on the acks of several), and
// turns whatever ends the wait otherwise into the call's error. It takes
// the call's fields one by one: the closure below escapes, and taking
// the *Call would move every caller's Call to the heap.
func (b *Board) wait(ctx context.Context, h Hooks, seq uint64, fp *[FPLen]byte, q int, ready func() bool) error {
	if h != nil {
		h.Waiting(q)
	}
	var fail error
	err := b.tb.Wait(ctx, func() bool {
		if ready() {
			return true
		}
		if h != nil && h.Aborted() {
			fail = ErrAborted
			return true
		}
		for m := 0; m < b.n; m++ {
			if m == b.me || (q >= 0 && m != q) {
				continue
			}
			if err := b.tb.Lost(m); err != nil {
				fail = err
				q = m
				return true
			}
			if theirs, ok := b.announced(m, seq); ok {
				fail = &MismatchError{Member: m, Seq: seq, Mine: *fp, Theirs: theirs, Announced: true}
				return true
			}
		}
		return false
	})
	if err == nil && fail == nil {
		return nil
	}
	if err == nil {
		err = fail
	}
	if me, ok := err.(*MismatchError); ok {
		return me
	}
	return &WaitError{Member: q, Seq: seq, Err: err}
}

// AllReduce is the board's allreduce of call c: every member posts buf
// and reduces all the slots, in member order, into buf with reduce
// (reduce(dst, src): dst = dst op src). scratch, if not nil, takes this
// member's own contribution before buf is overwritten.
//
// A member takes its own contribution from buf (member 0) or from
// scratch, not from its slot: the peers have just read the slot's line,
// and the processor may have handed the line over to them (AMD's
// migratory sharing), so that reading it back costs one more transfer of
// a line on every call, about as much as the exchange itself
// (BENCHMARKS.md). A payload larger than scratch is read back from the
// slot.
func (b *Board) AllReduce(ctx context.Context, c *Call, buf, scratch []byte, reduce func(dst, src []byte) error) error {
	seq := c.Seq
	if err := b.Post(ctx, c, buf); err != nil {
		return err
	}
	var mine []byte // this member's contribution; member 0's is buf itself
	if b.me > 0 {
		mine = b.Payload(seq, b.me, len(buf))
		if len(buf) <= len(scratch) {
			mine = scratch[:len(buf)]
			copy(mine, buf)
		}
		copy(buf, b.Payload(seq, 0, len(buf)))
	}
	for q := 1; q < b.n; q++ {
		src := mine
		if q != b.me {
			src = b.Payload(seq, q, len(buf))
		}
		if err := reduce(buf, src); err != nil {
			return err
		}
	}
	b.Ack(seq)
	b.Prefetch(seq + 1)
	return nil
}

// Barrier is the board's barrier: a post of nothing.
func (b *Board) Barrier(ctx context.Context, c *Call) error {
	if err := b.Post(ctx, c, nil); err != nil {
		return err
	}
	b.Ack(c.Seq)
	b.Prefetch(c.Seq + 1)
	return nil
}

// Prefetch asks the processor, as a call ends, for the lines that the
// next call (next) touches first if it runs on the board too: this
// member's slot in next's row, to write, and the peers' slots there, to
// read. The peers are done with that slot of this member (they read it
// in call next-2, before they posted call next-1, which this member has
// just read), so taking it from them costs them nothing, and the store
// that publishes call next finds the line owned instead of waiting for it
// to come back from the last reader. A peer that has posted call next
// already (the last member to arrive finds them all there) has its line
// on the way too. These are hints: a wrong guess costs a line transfer
// off the call's path (BENCHMARKS.md).
func (b *Board) Prefetch(next uint64) {
	row := int(next & 1)
	for q := 0; q < b.n; q++ {
		p := unsafe.Pointer(&b.mem[b.slotOff(row, q)])
		if q == b.me {
			cpu.PrefetchW(p)
		} else {
			cpu.Prefetch(p)
		}
	}
}
