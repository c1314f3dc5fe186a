package goccl

import (
	"errors"
	"fmt"
	"time"

	"github.com/goccl/goccl/transport"
)

// Failure handling has one owner: fail. Every way a failure reaches this
// rank (a call of its own that fails, a link that breaks, an abort notice
// from a peer, a stray message, Abort) describes it as a fault and hands
// it to fail, which records it, blames, tells the peers and closes the
// endpoint, in that order, once: the first fault wins, the others only
// add the blame they carry if none is recorded yet.
//
// What fail writes, in shared:
//
//	lost      the world rank whose loss aborted the communicator (-1)
//	blamed    whom every failed call names (abort_verdict.go)
//	aborted   the cause that later calls wrap, with ErrAborted
//	closed    closed once the endpoint is, after the notices have left
//
// The rules it applies are plain functions of what it knows, tested
// alone: culprit (whom a rank's own failure blames), classOf (what kind
// of failure a notice reports), blameMismatch's whoDiffers (which of two
// ranks made the odd call), settled (what a failed call reports).

// A fault is a failure this rank learnt of.
type fault struct {
	// cause is what later calls wrap (with ErrAborted).
	cause error
	// blame is the world rank the verdict names; -1: the culprit of
	// cause, found once this fault has won (culprit).
	blame int
	// lost: blame is gone (its link broke, or a peer's notice names it),
	// which Shrink and the errors of later calls go by.
	lost bool
	// notice: a mismatch notice's two ranks and calls, resolved against
	// this rank's own call when an error is reported (blamedPeer).
	notice *blamed
	// tell is the culprit the abort notice names to the peers; -1: the
	// rank blamed.
	tell int
	// relay: the notice is passed on from another goroutine (the
	// listener that heard it must not wait for the sends).
	relay bool
	// notified is the error the notice describes, if not cause (a lost
	// link tells the peers the link's own error).
	notified error
}

// fail records f and, if it is the first fault, tells the peers and
// closes the endpoint. It reports whether f was the first.
func (c *Comm) fail(f fault) bool {
	sh := c.shared
	if f.lost && f.blame >= 0 {
		sh.lost.CompareAndSwap(-1, int64(f.blame))
	}
	switch {
	case f.notice != nil:
		sh.blamed.CompareAndSwap(nil, f.notice)
	case f.blame >= 0:
		c.blame(f.blame)
	}
	if !c.markAborted(f.cause) {
		return false
	}
	if f.blame < 0 && f.notice == nil {
		f.blame = culprit(int(sh.lost.Load()), f.cause, c.ranks, sh.ep.Rank())
		c.blame(f.blame)
	}
	tell, what := f.tell, f.notified
	if tell < 0 {
		tell = f.blame
	}
	if what == nil {
		what = f.cause
	}
	if f.relay {
		go c.notify(tell, what)
	} else {
		c.notify(tell, what)
	}
	return true
}

// culprit is whom a rank's own failure (err) blames, as a world rank:
// the rank whose loss aborted the communicator if one did (lost >= 0),
// else the peer err names (a group rank, mapped through ranks), else the
// rank itself (me), which is also the culprit of a call its caller
// cancelled: the peer such an error names is only the one it waited on.
func culprit(lost int, err error, ranks []int, me int) int {
	if lost >= 0 {
		return lost
	}
	if ce := (*cancelError)(nil); errors.As(err, &ce) {
		return me
	}
	var ge *Error
	if errors.As(err, &ge) && ge.Peer >= 0 && ge.Peer < len(ranks) {
		return ranks[ge.Peer]
	}
	return me
}

// Abort fails every pending and later call with ErrAborted (wrapping
// cause) and closes the endpoint, as ncclCommAbort does.
func (c *Comm) Abort(cause error) {
	c.abort(cause)
}

// abort is the fault of a failure this rank saw itself.
func (c *Comm) abort(cause error) {
	c.fail(fault{cause: cause, blame: -1, tell: -1})
}

// peerLost is the fault of a link that broke (transport.PeerLossNotifier):
// the peer may have aborted and said why just before its link went (its
// notice is delivered before the link's end is), and then its verdict is
// adopted; otherwise it is the lost rank. It runs on the transport's
// goroutine, and closing the endpoint waits for that goroutine, so the
// rest runs on its own.
func (c *Comm) peerLost(pe *transport.PeerError) {
	sh := c.shared
	sh.pending.Add(1)
	go func() {
		defer sh.pending.Add(-1)
		// The link broke without a goodbye: the process is gone, whatever
		// it said before (a rank that aborted and then exited without
		// closing is as gone as one killed), and Shrink must not count it.
		sh.goneMu.Lock()
		sh.gone = append(sh.gone, pe.Peer)
		sh.goneMu.Unlock()
		if c.awaitNotice(pe.Peer, time.Second) {
			return // its verdict is adopted
		}
		c.fail(fault{cause: &Error{Op: "link", Rank: c.rank, Peer: pe.Peer, Err: pe.Err},
			blame: pe.Peer, lost: true, tell: -1, notified: pe.Err})
	}()
}

// markAborted records the first cause; later calls fail with it. Only
// fail calls it.
func (c *Comm) markAborted(cause error) bool {
	if cause == nil {
		cause = ErrAborted
	}
	e := fmt.Errorf("%w: %w", ErrAborted, cause)
	if !c.shared.aborted.CompareAndSwap(nil, &e) {
		return false
	}
	c.dumpToDir(traceReason(cause), cause)
	return true
}

// awaitClosed waits until an abort has closed the endpoint (every fault
// that wins closes it after telling the peers, within about 100 ms, or a
// second and that when it first waits for a lost peer's notice). If that
// takes two seconds it closes the endpoint itself: a call that failed
// returns only once no transport can touch its buffers.
func (c *Comm) awaitClosed() {
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-c.shared.closed:
	case <-t.C:
		c.closeEndpoint()
	}
}

// closeEndpoint ends every fault that won, once the peers are told.
func (c *Comm) closeEndpoint() {
	c.shared.closeOne.Do(func() { c.shared.ep.Close() })
	c.shared.notices.Stop()
	c.shared.doneOne.Do(func() { close(c.shared.closed) })
}
