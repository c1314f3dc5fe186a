package goccl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/internal/cpu"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
)

// The board: small collectives in shared memory. Where every rank of a
// group shares memory with every other (goroutines over transport/mem,
// processes of one host over transport/shm), the transport offers a
// block that all of them map (transport.Board), and allreduces of up to boardMax bytes and barriers run on it instead
// of over messages: each rank writes its contribution, with its call's
// fingerprint, into a slot of its own, publishes it by storing the call's
// sequence number, and reads every other rank's slot straight from the
// block. There is no message, no matching, no copy into a queue, and no
// wake-up while the ranks keep pace; an 8-byte allreduce on two ranks
// costs a few cache-line transfers. NCCL's LL protocol and Open MPI's
// shared-memory collectives do the same.
//
// Every rank reduces the slots in rank order, 0 first, so that every rank
// holds the same bits. Picture for 4 ranks, call #9 (odd: slot row 1):
//
//	row 1:  [r0 #9 | a0]  [r1 #9 | a1]  [r2 #9 | a2]  [r3 #9 | a3]
//	each rank:  buf = a0 + a1 + a2 + a3, then acks row 1 up to #9
//
// Cost: one write of m bytes and n-1 reads of m bytes per rank, and the
// reduction of n slots: α_mem + n·m·(β_mem + γ), α_mem being a cache-line
// transfer (tens of nanoseconds), against ⌈log2 n⌉ message rounds.
//
// Layout, for n members (each slot and each ack line starts a 64-byte
// line):
//
//	announce  n × 8 lines: member m's entry e = seq mod 8 holds the seq
//	          and fingerprint of its call seq, written only for calls that
//	          do not run on the board
//	acks      n lines: member m's last call read in row 0, in row 1
//	slots     2 rows × n slots; member m's slot in row seq mod 2:
//	            seq u64 | len u16, ack u48 | fingerprint [32] | payload (boardMax)
//
// A payload of up to 16 bytes shares the slot's first line with its
// sequence number and fingerprint, so a reader of an 8-byte allreduce
// pulls one line per peer, and the writer one ack line per peer.
//
// Slots are reused: a rank writes its slot in row p for call s only once
// its previous board call in that row, prev, is written and every rank
// has acked it (its ack for row p is prev or later: a rank reads a row's
// calls in order, since it cannot finish a later one before every slot
// of the earlier one was rewritten). While ranks keep pace this holds on
// arrival (a rank reaches call s+2 only after reading everyone's call
// s+1, which they wrote after reading call s); async calls and calls from
// several goroutines wait for it. The writer's test would read every
// member's ack line, which that member rewrote in its last call: a cache
// miss per member before the slot is written, on every call. So a slot
// also carries its writer's ack of the other row, as it was when the
// slot was written (ack above): the reader of call s+1 learns there that
// its peer has read call s, which is what its call s+2 will ask, and
// reads an ack line only where a member's slots have not said enough
// (BENCHMARKS.md).
//
// Mismatches. A slot carries its call's fingerprint, and the reader
// compares it with its own, as for a first message. A rank whose call
// does not run on the board (another count, another collective) leaves
// its slot alone and announces the call instead; a rank waiting for its
// slot at call s that finds the announcement of s fails at once with
// ErrMismatch naming it. A lost member (its endpoint closed) and an abort
// end every wait.
const (
	boardMax  = 1 << 10 // the largest payload that runs on the board
	boardAnn  = 8       // announcement entries per member
	boardLine = 64
	algoBoard = algo.Algorithm("board")
)

// EnvBoard set to 0 (or off, false) keeps small collectives off the board,
// over messages, for comparison (goccl bench -transport mem with and
// without it).
const EnvBoard = "GOCCL_BOARD"

// board is one group's block, from one member's side.
type board struct {
	tb    transport.Board
	mem   []byte
	n, me int
	slot  int  // bytes of one slot
	acks  int  // offset of the ack lines
	data  int  // offset of the slot rows
	off   bool // GOCCL_BOARD=0: no call runs on it, every call is announced
	polls int  // reads of a slot before a wait through the transport
	// known[2m+row]: a call of that row that member m has acked, as
	// m's slots said (learn); at most its ack, never more.
	known []atomic.Uint64
}

// Within a slot: the sequence number, the payload's length, the
// fingerprint, the payload.
const (
	slotLen     = 8 // the length in the low 16 bits, the ack above
	slotFP      = 16
	slotPayload = slotFP + fpLen
)

// newBoard returns c's board, or nil where its transport offers none
// (transport.ErrNoBoard: the answer of every member). Any other failure to
// get it is an error: the other members may have the board, and their
// calls would wait on this rank's slot until the timeout.
func newBoard(c *Comm, bd transport.Boarder) (*board, error) {
	if bd == nil || c.Size() < 2 {
		return nil, nil
	}
	n := c.Size()
	b := &board{n: n, me: c.rank, slot: (slotPayload + boardMax + boardLine - 1) / boardLine * boardLine}
	b.known = make([]atomic.Uint64, 2*n)
	b.acks = n * boardAnn * boardLine
	b.data = b.acks + n*boardLine
	tb, err := bd.Board(c.id, c.ranks, b.data+2*n*b.slot)
	if errors.Is(err, transport.ErrNoBoard) {
		return nil, nil // the collectives go over messages
	}
	if err != nil {
		return nil, fmt.Errorf("shared-memory board of group %#x: %w", c.id, err)
	}
	b.tb, b.mem = tb, tb.Bytes()
	// With the board off the block is still made, and every call is
	// announced on it: a rank whose GOCCL_BOARD says otherwise then
	// fails at once, naming this one, instead of waiting to the timeout.
	b.off = ipcDisabled(c.opts.getenv(EnvBoard))
	b.polls = boardPolls
	if c.opts.spin < 0 {
		b.polls = 1 // GOCCL_SPIN=0, or more ranks than CPUs: no polling
	}
	return b, nil
}

func (b *board) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b.mem[off]))
}

func (b *board) slotOff(row, m int) int { return b.data + (row*b.n+m)*b.slot }

func (b *board) annOff(m int, seq uint64) int {
	return (m*boardAnn + int(seq%boardAnn)) * boardLine
}

// announce says that this rank's call seq, with fingerprint fp, does not
// run on the board.
func (b *board) announce(seq uint64, fp *fingerprint) {
	off := b.annOff(b.me, seq)
	for i := 0; i < fpLen; i += 8 {
		b.word(off + 8 + i).Store(binary.LittleEndian.Uint64(fp[i:]))
	}
	b.word(off).Store(seq)
	b.tb.Wake()
}

// announced returns member q's fingerprint of its call seq if q announced
// that call (it does not run on the board).
func (b *board) announced(q int, seq uint64) (fp fingerprint, ok bool) {
	off := b.annOff(q, seq)
	if b.word(off).Load() != seq {
		return fp, false
	}
	for i := 0; i < fpLen; i += 8 {
		binary.LittleEndian.PutUint64(fp[i:], b.word(off+8+i).Load())
	}
	return fp, true // the words may be a later call's: only the message suffers
}

// post publishes payload as this rank's contribution to k (sequence seq;
// k.prev, this rank's previous board call in the same row) and waits
// until every member's slot holds the call. A member's
// fingerprint that differs from this rank's, a member that does not run
// the call on the board, a lost member or an abort ends it with the error
// that the same failure over messages gives. Then the caller reads the
// slots (payload) and acks them (ack).
//
// Everything between the previous call's end and the store that
// publishes this one is the call's time, at any rate on the ranks the
// others wait for; what follows the store runs while the peers' slots
// are on their way, except on the last rank to arrive, which finds them
// there. So a call made in place stamps its start for the flight
// recorder (k.stamp, internal/clock: 12 ns where time.Since takes 33)
// only once it has published, and its context, which would read the
// monotonic clock for the deadline, starts only if the call waits
// (k.waits): the timeout then counts from the wait, after at most
// boardPolls reads.
func (b *board) post(ctx context.Context, k *call, seq uint64, payload []byte) error {
	p, prev := k.p, k.prev
	row := int(seq & 1)
	mine := b.slotOff(row, b.me)
	if prev != 0 && !b.free(prev) {
		if err := b.wait(ctx, k, -1, func() bool { return b.free(prev) }); err != nil {
			return err
		}
	}
	// Plain writes: the store of seq below publishes them.
	binary.LittleEndian.PutUint64(b.mem[mine+slotLen:], uint64(len(payload))|b.ackOf(b.me, 1-row)<<16)
	putFP(b.mem[mine+slotFP:mine+slotPayload], &p.fp)
	copy(b.mem[mine+slotPayload:], payload)
	b.word(mine).Store(seq)
	b.tb.Wake()
	k.stamp()

	for q := 0; q < b.n; q++ {
		if q == b.me {
			continue
		}
		off := b.slotOff(row, q)
		if !b.poll(off, seq) {
			if err := b.wait(ctx, k, q, func() bool { return b.word(off).Load() == seq }); err != nil {
				return err
			}
		}
		if p.check && !equalFP(b.mem[off+slotFP:off+slotPayload], &p.fp) {
			var theirs fingerprint
			copy(theirs[:], b.mem[off+slotFP:off+slotPayload])
			return &Error{Op: p.op, Rank: p.c.rank, Peer: q, Dir: "<-",
				Err: &mismatchError{mine: p.fp, theirs: theirs, peer: q}}
		}
		w := b.word(off + slotLen).Load()
		b.learn(q, 1-row, w>>16)
		if got := int(w & 0xffff); got != len(payload) {
			r := &request{p: p, peer: q, dir: "<-"}
			return r.lengthMismatch(got, len(payload))
		}
	}
	return nil
}

// boardPolls is how many times post reads a slot before it waits through
// the transport (which spins longer, yielding, then parks): a peer that
// is a few microseconds behind costs no more than the reads. Between two
// reads the poll relaxes (cpu.Relax, about 20 ns here): a loop of bare
// reads takes issue slots from a rank on the other hardware thread of the
// core and keeps asking for a line the peer is about to write, and the
// 8-byte allreduce took 0.66 us instead of 0.57 in BENCHMARKS.md's slow
// state. Where the transports do not poll (GOCCL_SPIN=0, or more ranks
// than CPUs) the board reads once.
const boardPolls = 256

// poll reads the word at off up to b.polls times for seq.
func (b *board) poll(off int, seq uint64) bool {
	w := b.word(off)
	for range b.polls {
		if w.Load() == seq {
			return true
		}
		cpu.Relax()
	}
	return false
}

// payload is member q's payload of n bytes in the call's row.
func (b *board) payload(seq uint64, q, n int) []byte {
	off := b.slotOff(int(seq&1), q) + slotPayload
	return b.mem[off : off+n]
}

// ack tells every member that this rank has read their slots of call
// seq, which they may then reuse.
func (b *board) ack(seq uint64) {
	b.word(b.acks + b.me*boardLine + 8*int(seq&1)).Store(seq)
	b.tb.Wake()
}

// free reports whether this rank's slot in prev's row may take a new
// call: every member has acked prev, this rank too (an async call of its
// own may still be reading it). A rank acks only a call it has posted, so
// its own ack also says that the slot holds prev; free does not read the
// slot to see. That read would cost a cache miss on every call: the peers
// have just read the slot's line, and the processor may have handed it
// to them (AMD's migratory sharing), so that the read fetches it back in
// a shared state and the write that follows fetches it once more, to own
// it; two transfers of the line where the write alone costs one (0.75 to
// 0.60 us in BENCHMARKS.md's slow state). A member's ack line is read
// only where its slots have not said as much already.
func (b *board) free(prev uint64) bool {
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
func (b *board) ackOf(m, row int) uint64 {
	return b.word(b.acks + m*boardLine + 8*row).Load()
}

// learn notes that member m has acked call ack of row. Two calls that
// learn at once may leave the smaller value: still an ack m made.
func (b *board) learn(m, row int, ack uint64) {
	if k := &b.known[2*m+row]; ack > k.Load() {
		k.Store(ack)
	}
}

// wait waits until ready, on member q (-1: on the acks of several), and
// turns whatever ends the wait otherwise into the call's error.
func (b *board) wait(ctx context.Context, k *call, q int, ready func() bool) error {
	k.waits()
	p := k.p
	c := p.c
	seq := uint64(p.tag) & (tagP2P - 1)
	var fail error
	if q >= 0 {
		p.waitOn.Store(int32(q + 1))
	}
	err := b.tb.Wait(ctx, func() bool {
		if ready() {
			return true
		}
		if c.shared.aborted.Load() != nil {
			fail = fmt.Errorf("board: %w", transport.ErrClosed)
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
				var why error = &mismatchError{mine: p.fp, theirs: theirs, peer: m}
				if theirs == p.fp {
					// The same call, off the board there: the ranks'
					// GOCCL_BOARD or forced algorithms differ.
					why = fmt.Errorf("%w: %v runs on the shared board here and over messages on peer %d (GOCCL_BOARD or the forced algorithm differs between the ranks)", ErrMismatch, p.fp, m)
				}
				fail = &Error{Op: p.op, Rank: c.rank, Peer: m, Dir: "<-", Err: why}
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
	var ge *Error
	if errors.As(err, &ge) {
		return err
	}
	r := &request{p: p, peer: max(q, 0), dir: "<-"}
	if q < 0 {
		r.peer = c.lostPeer()
		if r.peer < 0 {
			return &Error{Op: p.op, Rank: c.rank, Peer: -1, Err: classify(err)}
		}
	}
	return r.wrap(err)
}

// useBoard reports whether a call of bytes on host memory runs on c's
// board: c has one, the call is small, and neither the call nor the
// configuration names an algorithm (free). Every rank answers alike for
// the same call, and where calls differ the fingerprint or the
// announcement says so.
func (c *Comm) useBoard(bytes int, free bool) bool {
	return c.board != nil && !c.board.off && bytes <= boardMax && free && c.opts.algos == nil
}

// newBoardCall makes a call that runs on c's board, from the pool (a
// synchronous caller returns it with do).
func (c *Comm) newBoardCall(name string, dt reduceop.DType, bytes int) *call {
	k := c.newPooledCall(name, dt, bytes, algoBoard)
	k.onBoard = true
	return k
}

// boardAllReduce makes the call of an allreduce on the board.
func (c *Comm) boardAllReduce(name string, v *view, op reduceop.Op) *call {
	k := c.newBoardCall(name, v.dt, v.bytes()).agree(v.n, op, -1)
	k.silent = false // the board compares fingerprints even with no element
	k.boardBuf, k.boardOp = v.b, op
	c.peers(k, v.dt, reducer(reduceop.Host{}, v.dt, op))
	return k
}

// run runs k, a call on the board: an allreduce of k.boardBuf with
// k.boardOp, or a barrier where k has no reducer.
func (b *board) run(ctx context.Context, k *call) error {
	if k.p.reduce == nil {
		return b.barrier(ctx, k)
	}
	if err := b.allReduce(ctx, k); err != nil {
		return err
	}
	if k.boardOp == reduceop.Avg {
		return (reduceop.Host{}).Scale(k.dt, k.boardBuf, b.n)
	}
	return nil
}

// allReduce is the board's allreduce of k: every rank reduces all the
// slots, in rank order, into k.boardBuf.
//
// A rank takes its own contribution from buf (rank 0) or from a copy
// made before buf is overwritten (k.mine), not from its slot: the peers
// have just read the slot's line, and the processor may have handed the
// line over to them (AMD's migratory sharing), so that reading it back
// costs one more transfer of a line on every call, about as much as the
// exchange itself (BENCHMARKS.md). A payload larger than k.mine is read
// back from the slot.
func (b *board) allReduce(ctx context.Context, k *call) error {
	p, buf := k.p, k.boardBuf
	seq := uint64(p.tag) & (tagP2P - 1)
	if err := b.post(ctx, k, seq, buf); err != nil {
		return err
	}
	var mine []byte // this rank's contribution; rank 0's is buf itself
	if b.me > 0 {
		mine = b.payload(seq, b.me, len(buf))
		if len(buf) <= len(k.mine) {
			mine = k.mine[:len(buf)]
			copy(mine, buf)
		}
		copy(buf, b.payload(seq, 0, len(buf)))
	}
	for q := 1; q < b.n; q++ {
		src := mine
		if q != b.me {
			src = b.payload(seq, q, len(buf))
		}
		if err := p.Reduce(buf, src); err != nil {
			return err
		}
	}
	b.ack(seq)
	b.prefetch(seq + 1)
	return nil
}

// prefetch asks the processor, as a board call ends, for the lines that
// the next call (next) touches first if it runs on the board too: this
// rank's slot in next's row, to write, and the peers' slots there, to
// read. The peers are done with that slot of this rank (they read it in
// call next-2, before they posted call next-1, which this rank has just
// read), so taking it from them costs them nothing, and the store that
// publishes call next finds the line owned instead of waiting for it to
// come back from the last reader. A peer that has posted call next
// already (the last rank to arrive finds them all there) has its line on
// the way too. These are hints: a wrong guess costs a line transfer off
// the call's path (BENCHMARKS.md).
func (b *board) prefetch(next uint64) {
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

// barrier is the board's barrier: a post of nothing.
func (b *board) barrier(ctx context.Context, k *call) error {
	seq := uint64(k.p.tag) & (tagP2P - 1)
	if err := b.post(ctx, k, seq, nil); err != nil {
		return err
	}
	b.ack(seq)
	b.prefetch(seq + 1)
	return nil
}

func (b *board) close() {
	if b != nil {
		b.tb.Close()
	}
}
