package goccl

import (
	"encoding/binary"
)

// Leaving. Calls are matched by their order, so a rank that skips a call
// whose neighbours in the sequence look the same (twelve identical
// allreduces, one skipped) cannot be caught at the skip: its later calls
// pair with the peers' calls of one slot earlier, as in NCCL, Gloo and
// MPI. It can be caught at the end. A world communicator that closes
// without having been aborted tells every peer, on the abort-notice tag,
// how many collectives it made (class classLeft, the count in bytes
// 16..24). A peer whose call then fails because that rank is gone, and
// whose call comes after the leaver's last, fails at once with
// ErrMismatch naming the leaver and both counts, instead of ErrPeerClosed
// or, where the link's end is not seen, the timeout.

// sayLeaving sends the leave notice and waits briefly for it to go.
func (c *Comm) sayLeaving() {
	sh := c.shared
	var b [noticeLen]byte
	binary.LittleEndian.PutUint64(b[:], uint64(int64(sh.ep.Rank())))
	b[8] = classLeft
	sh.calls.Lock()
	calls := c.track.seq
	sh.calls.Unlock()
	binary.LittleEndian.PutUint64(b[16:], calls)
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
	if c.id != 0 || uint64(r.p.tag)&tagP2P != 0 {
		return nil // a group's or a point-to-point call: the count is the world's
	}
	c.shared.goneMu.Lock()
	calls, ok := c.shared.left[c.ranks[r.peer]]
	c.shared.goneMu.Unlock()
	seq := uint64(r.p.tag) & (tagP2P - 1)
	if !ok || seq <= calls {
		return nil
	}
	// Its "call" is a fingerprint that says so, which an abort notice
	// carries on to the ranks that do not wait on it.
	var gone fingerprint
	gone[0], gone[1] = 'G', 'L'
	copy(gone[12:16], r.p.fp[12:16])
	binary.LittleEndian.PutUint64(gone[24:], calls)
	return &Error{Op: r.p.op, Rank: c.rank, Peer: r.peer, Dir: r.dir,
		Err: &mismatchError{mine: r.p.fp, theirs: gone, peer: r.peer}}
}
