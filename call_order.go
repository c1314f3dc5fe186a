package goccl

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/transport"
)

// Stray messages. Every message of a collective travels under the call's
// tag, which holds the group's id and the call's sequence number, in the
// frame header of every message (not only in the first, which also
// carries the fingerprint). In a program where the ranks agree, a rank
// receives every message sent to it under a call's tag before that call
// returns. So a message that arrives under the tag of a call this rank
// has already finished, or is still queued under it when the call ends,
// is proof that the sender's call differs from this rank's: a rank that
// skipped a call, or made an extra one, sends under a number its peer has
// used for another call. Such cases slip past the fingerprint when the
// rank they concern receives nothing from the other side in that call (a
// broadcast's root, a gather's leaf, a call of zero elements), and would
// otherwise end only at the timeout. The receiver fails at once with
// ErrMismatch naming the sender and both calls ("this rank called
// gather(...) #4, peer 0 called reduce_scatter(...) #4"), and its abort
// notice tells the others.
//
// A call is finished for this purpose once it and every call ordered
// before it on its communicator have returned (async calls may end out
// of order). The transport keeps the test (transport.StrayReporter).

// callTrack follows a communicator's calls: how many were ordered, and
// which are finished. shared.calls guards it (retired is also read
// without it).
type callTrack struct {
	seq       uint64   // the collectives ordered
	inflight  []uint64 // ordered, not yet finished (a few at most)
	retired   atomic.Uint64
	boardLast [2]uint64 // the last board call ordered in each slot row (call_board.go)
	history   history   // the fingerprints of the recent calls (abort_verdict.go)
}

// orderLocked orders k: it takes the call's tag and counts it in flight,
// as one step, so that no call is ever counted finished before it is
// ordered, makes its fingerprint and keeps it in the history. A call that
// may run on the board (k.onBoard) also gets this rank's previous board
// call in its slot row, which must be written and acked before the slot
// takes this one. c.shared.calls is held: take orders and records a call
// in one critical section, since an 8-byte allreduce on the board pays
// for every lock it takes (BENCHMARKS.md).
func (c *Comm) orderLocked(k *call) (prev uint64) {
	p := k.p
	t := &c.track
	p.tag = c.nextTag()
	seq := wire.Seq(p.tag)
	t.inflight = append(t.inflight, seq)
	if k.onBoard {
		prev, t.boardLast[seq&1] = t.boardLast[seq&1], seq
	}
	if p.check || c.board != nil {
		setFP(&p.fp, k, c.id, p.tag)
	}
	if p.check {
		t.history.add(&p.fp)
	}
	return prev
}

// finishLocked marks the call seq of c finished and returns the sequence
// numbers that this makes retired: (from, to]. c.shared.calls is held.
func (c *Comm) finishLocked(seq uint64) (from, to uint64) {
	t := &c.track
	if n := len(t.inflight); n > 0 && t.inflight[n-1] == seq {
		t.inflight = t.inflight[:n-1] // the latest call ends first: every synchronous one
	} else if i := slices.Index(t.inflight, seq); i >= 0 {
		t.inflight = slices.Delete(t.inflight, i, i+1)
	}
	to = t.seq & wire.SeqMask // the last call ordered
	if len(t.inflight) > 0 {
		to = slices.Min(t.inflight) - 1
	}
	from = t.retired.Load()
	if to > from {
		t.retired.Store(to)
	}
	return from, to
}

// finished reports whether the call a collective's tag names is over on
// this rank (transport.StrayReporter's test).
func (sh *shared) finished(tag transport.Tag) bool {
	if wire.IsP2P(tag) {
		return false // point-to-point: the user's tags
	}
	v, ok := sh.groups.Load(wire.Group(tag))
	if !ok {
		return false // a notice, or a group this rank is not in
	}
	seq := wire.Seq(tag)
	return seq > 0 && seq <= v.(*Comm).track.retired.Load()
}

// retire sweeps the messages left under the tags of the calls (from, to]
// of c: each is a stray.
func (c *Comm) retire(from, to uint64) {
	sr := c.shared.strays
	if sr == nil {
		return
	}
	for seq := from + 1; seq <= to; seq++ {
		sr.Retire(wire.CollectiveTag(c.id, seq))
	}
}

// stray turns a message nobody will receive into the mismatch it shows,
// and aborts the communicator with it. It runs on a transport goroutine.
func (sh *shared) stray(from int, tag transport.Tag, head []byte) {
	v, ok := sh.groups.Load(wire.Group(tag))
	if !ok {
		return
	}
	c := v.(*Comm)
	peer := slices.Index(c.ranks, from)
	if peer < 0 || sh.aborted.Load() != nil {
		return
	}
	seq := wire.Seq(tag)
	probe := wire.Probe(wire.KindCall, uint32(c.id), seq)
	mine, _ := c.recentCall(probe)
	var theirs fingerprint
	copy(theirs[:], head)
	withFP := theirs.Kind() == wire.KindCall && wire.SameCall(&theirs, &probe)
	if !withFP {
		// Not the call's first message: say what is known.
		theirs = wire.Probe(wire.KindStray, uint32(c.id), seq)
	}
	op := "collective"
	if mine[0] == 'G' {
		op = mine.Op()
	}
	err := &Error{Op: op, Rank: c.rank, Peer: peer, Dir: "<-",
		Err: &mismatchError{mine: mine, theirs: theirs, peer: peer}}
	if !withFP {
		// A payload can be reported a moment before its call's first
		// message, which names the sender's call: let that one win.
		time.AfterFunc(strayGrace, func() { c.abort(err) })
		return
	}
	go c.abort(err)
}

// strayGrace is how long a stray without a fingerprint waits before it
// aborts, for a report that says more.
const strayGrace = 20 * time.Millisecond
