package goccl

import (
	"errors"
	"slices"

	"github.com/goccl/goccl/internal/wire"
)

// The verdict: once a communicator is aborted, every failed call on it
// says the same thing, whichever way the news reached this rank first
// (its own receive, a peer's abort notice, a link that broke, a relay of
// any of these). The rules, which README's Errors section states:
//
//   - every error of a call that aborted the communicator, or that failed
//     because it was aborted, wraps ErrAborted (argument errors, which
//     abort nothing, wrap ErrInvalid instead);
//   - it wraps the class of the first cause this rank recorded:
//     ErrPeerClosed when a rank died, ErrMismatch when calls differed,
//     ErrTimeout, ErrProtocol;
//   - its Peer is the rank the verdict blames, in the communicator's own
//     numbering: the dead rank, or for a mismatch the rank whose call
//     differs from this rank's call (see blameMismatch), never a rank that
//     only passed the news on.
//
// A call that saw a mismatch first-hand keeps its own words (both calls,
// side by side), since they are the most precise account there is.

// historyLen is how many of its recent calls a communicator remembers,
// to compare with the calls a mismatch notice names. A notice is about a
// call in flight on its sender, so only the last few matter; async calls
// can put a few more between.
const historyLen = 64

// history is a ring of the fingerprints of one communicator's recent
// calls. Its communicator's callTrack holds it, under the lock that
// orders the calls (shared.calls).
type history struct {
	fps [historyLen]fingerprint
	n   int
}

func (h *history) add(f *fingerprint) {
	wire.Put(h.fps[h.n%historyLen][:], f)
	h.n++
}

// find returns the fingerprint of the call with the same sequence number
// as f, if it is still remembered.
func (h *history) find(f fingerprint) (fingerprint, bool) {
	for i := range min(h.n, historyLen) {
		g := h.fps[(h.n-1-i)%historyLen]
		if wire.SameCall(&f, &g) {
			return g, true
		}
	}
	return fingerprint{}, false
}

// recentCall returns this rank's fingerprint of the call f names (its
// group and sequence number), if that call is still remembered.
func (sh *shared) recentCall(f fingerprint) (fingerprint, bool) {
	if f.Kind() != wire.KindCall {
		return fingerprint{}, false
	}
	v, ok := sh.groups.Load(uint64(f.Group()))
	if !ok {
		return fingerprint{}, false
	}
	return v.(*Comm).recentCall(f)
}

// recentCall is shared.recentCall within c.
func (c *Comm) recentCall(f fingerprint) (fingerprint, bool) {
	c.shared.calls.Lock()
	defer c.shared.calls.Unlock()
	return c.track.history.find(f)
}

// blameMismatch returns the world rank this rank names for a mismatch
// that witness saw between its own call (fp witnessFP) and culprit's
// (culpritFP): the rank whose call differs from this rank's own call of
// that slot. When this rank made the witness's call, that is the culprit;
// when it made the culprit's call, the witness. When its call is unknown
// (it has not reached that slot, or a length mismatch carries no
// fingerprints) it takes the witness's word, unless that word names this
// rank, whose call then differs from the witness's.
func (c *Comm) blameMismatch(witness, culprit int, witnessFP, culpritFP fingerprint) int {
	mine, known := c.shared.recentCall(witnessFP)
	return whoDiffers(c.shared.ep.Rank(), mine, known, witness, culprit, witnessFP, culpritFP)
}

// whoDiffers is blameMismatch's rule, for rank me whose own call of the
// slot is mine (if known).
func whoDiffers(me int, mine fingerprint, known bool, witness, culprit int, witnessFP, culpritFP fingerprint) int {
	if known {
		switch mine {
		case witnessFP:
			return culprit
		case culpritFP:
			return witness
		}
	}
	if culprit == me {
		return witness
	}
	return culprit
}

// blamed is whom the verdict names: a world rank, or for a mismatch the
// two ranks of the notice, resolved against this rank's own call only
// when an error is reported (the notice may arrive before this rank has
// made the call it is about).
type blamed struct {
	world             int
	mismatch          bool
	witness, culprit  int
	witnessFP, culpFP fingerprint
	from              int // who sent the notice: named if the rest would name this rank
}

// blame records the world rank the verdict names, if none is yet.
func (c *Comm) blame(world int) {
	if world >= 0 && world != c.shared.ep.Rank() {
		c.shared.blamed.CompareAndSwap(nil, &blamed{world: world})
	}
}

// blamedPeer returns the rank the verdict names in c's numbering, or -1.
func (c *Comm) blamedPeer() int {
	b := c.shared.blamed.Load()
	if b == nil {
		return c.lostPeer()
	}
	w := b.world
	if b.mismatch {
		w = c.blameMismatch(b.witness, b.culprit, b.witnessFP, b.culpFP)
		if w == c.shared.ep.Rank() {
			w = b.from // a notice that names only this rank: name who sent it
		}
	}
	return slices.Index(c.ranks, w)
}

// abortedErr is a call's own failure that is also the communicator's
// abort: the same words, and errors.Is finds ErrAborted too.
type abortedErr struct{ err error }

func (e *abortedErr) Error() string   { return e.err.Error() }
func (e *abortedErr) Unwrap() []error { return []error{e.err, ErrAborted} }

// settled returns the error a failed call reports, once the communicator
// is aborted (exec aborts it first): err itself when it is the abort's
// cause or a mismatch this call saw, else the verdict, naming the blamed
// rank. Either way it wraps ErrAborted.
func (c *Comm) settled(op string, err error) error {
	p := c.shared.aborted.Load()
	if p == nil || errors.Is(err, ErrAborted) && c.names(err) && classOf(err) == classOf(*p) {
		return err // already the verdict
	}
	var ge *Error
	if !errors.As(err, &ge) {
		ge = &Error{Op: op, Rank: c.rank, Peer: -1, Err: err}
	}
	first := errors.Is(*p, err) || errors.Is(err, ErrMismatch)
	// A failure of the verdict's own kind that this call saw for itself (a
	// monitored barrier's timeout naming the missing ranks, say) keeps its
	// words too, naming the rank the verdict blames.
	sameKind := classOf(err) != classAborted && classOf(err) == classOf(*p) && !errors.Is(err, ErrPeerClosed)
	if first || sameKind {
		e := *ge
		e.Err = &abortedErr{ge.Err}
		if b := c.blamedPeer(); !first && b >= 0 && b != e.Peer {
			e.Peer, e.Dir = b, ""
		}
		return &e
	}
	// A consequence (a relayer's goodbye, the endpoint closed under the
	// call, a wait cut short): report the cause.
	peer := c.blamedPeer()
	if peer < 0 {
		peer = ge.Peer
	}
	dir := ""
	if peer == ge.Peer {
		dir = ge.Dir
	}
	return &Error{Op: ge.Op, Rank: c.rank, Peer: peer, Dir: dir, Err: *p}
}

// names reports whether an error derived from the verdict already names
// the blamed rank (or the verdict names none).
func (c *Comm) names(err error) bool {
	b := c.blamedPeer()
	if b < 0 {
		return true
	}
	var ge *Error
	return errors.As(err, &ge) && ge.Peer == b
}
