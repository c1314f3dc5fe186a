package goccl

import "github.com/goccl/goccl/internal/wire"

// Leaving. Calls are matched by their order, so a rank that skips a call
// whose neighbours in the sequence look the same (twelve identical
// allreduces, one skipped) cannot be caught at the skip: its later calls
// pair with the peers' calls of one slot earlier, as in NCCL, Gloo and
// MPI. It can be caught at the end. A world communicator that closes
// without having been aborted tells every peer, on the abort-notice tag,
// how many collectives it made (class classLeft, the count in bytes
// wire.Notice). A peer whose call then fails because that rank is gone, and
// whose call comes after the leaver's last, fails at once with
// ErrMismatch naming the leaver and both counts, instead of ErrPeerClosed
// or, where the link's end is not seen, the timeout.

// sayLeaving sends the leave notice and waits briefly for it to go.
func (c *Comm) sayLeaving() {
	sh := c.shared
	sh.calls.Lock()
	calls := c.track.seq
	sh.calls.Unlock()
	var b [noticeLen]byte
	(&wire.Notice{Culprit: sh.ep.Rank(), Class: classLeft, Calls: calls}).Encode(b[:])
	c.tellAll(b[:])
}

// leftAfter records that world rank q closed after calls collectives.
func (sh *shared) leftAfter(q int, calls uint64) {
	sh.goneMu.Lock()
	defer sh.goneMu.Unlock()
	if sh.left == nil {
		sh.left = make(map[int]uint64)
	}
	sh.left[q] = calls
}

// leftEarly returns ErrMismatch if the request's peer closed its world
// communicator before making this call, else nil.
func (r *request) leftEarly() error {
	c := r.p.c
	if c.id != 0 || wire.IsP2P(r.p.tag) {
		return nil // a group's or a point-to-point call: the count is the world's
	}
	c.shared.goneMu.Lock()
	calls, ok := c.shared.left[c.ranks[r.peer]]
	c.shared.goneMu.Unlock()
	if !ok || !leftBefore(wire.Seq(r.p.tag), calls) {
		return nil
	}
	// Its "call" is a fingerprint that says so, which an abort notice
	// carries on to the ranks that do not wait on it.
	gone := wire.Probe(wire.KindLeft, r.p.fp.Group(), calls)
	return &Error{Op: r.p.op, Rank: c.rank, Peer: r.peer, Dir: r.dir,
		Err: &mismatchError{mine: r.p.fp, theirs: gone, peer: r.peer}}
}

// leftBefore reports whether call seq comes after the last of the calls
// a rank made before it left: that rank skipped it.
func leftBefore(seq, calls uint64) bool { return seq > calls }
