package goccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/notice"
	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/transport"
)

// Blame: when a collective fails, every rank must end with an error that
// names the same culprit, not the neighbour it happened to be waiting on.
//
// Abort notices. A rank that aborts because of a failure tells every peer,
// before it closes its endpoint, which world rank it blames and what kind
// of failure it saw, on a reserved tag (wire.Notice): for a mismatch also
// the witness and the witness's and the culprit's fingerprints. The witness is the rank that saw the
// mismatch; a relayed notice keeps it. Every world communicator
// keeps a receive for that notice posted from each peer it holds a link
// to (posted when the link comes up: transport.LinkNotifier), so a rank that is
// blocked waiting on someone else adopts the verdict at once. On a
// connection the notice travels ahead of the goodbye, so a rank whose
// receive fails because the messenger closed can read the messenger's
// verdict at that very moment.
//
// Stalls. A rank that times out waiting on peer p does not know whether p
// is the culprit or is itself waiting on someone. Before aborting it sends
// every peer a wait notice "I wait on p" and listens for the others' for a
// short grace period (a tenth of the timeout, at most a second). The ranks
// stuck in the same collective time out within that window, and the chain
// of waits they report ends at the rank that reported nothing, the one
// that is stopped or busy elsewhere:
//
//	rank 2 stopped; ring allreduce on 4 ranks
//	rank 3 waits on 2, rank 0 waits on 3, rank 1 waits on 0
//	rank 1 follows 0 -> 3 -> 2; 2 sent no notice: the culprit is 2
//
// A chain that loops (ranks waiting on each other, as in a mismatch that
// the fingerprint could not see) blames the direct peer. A rank that hears
// a verdict while it is still listening takes it.

// Tags of the notices: the group id all ones is never given to a group
// (wire.GroupID), and transport/tcp's goodbye tag is all ones.
const (
	tagWaitNotice  = wire.WaitTag
	tagAbortNotice = wire.AbortTag
	noticeLen      = wire.NoticeLen
)

// Failure classes carried by an abort notice (wire.Class): classLeft is
// no failure but a rank that closed its communicator on purpose
// (abort_leave.go), classCancelled a rank whose caller cancelled a call in
// flight (abort_cancel.go), the culprit being the sender itself.
const (
	classAborted    = wire.ClassAborted
	classTimeout    = wire.ClassTimeout
	classPeerClosed = wire.ClassPeerClosed
	classProtocol   = wire.ClassProtocol
	classMismatch   = wire.ClassMismatch
	classLeft       = wire.ClassLeft
	classCancelled  = wire.ClassCancelled
)

func classOf(err error) wire.Class {
	if ce := (*cancelError)(nil); errors.As(err, &ce) {
		return classCancelled
	}
	if rep := (*PeerReport)(nil); errors.As(err, &rep) && rep.class == classCancelled {
		return classCancelled // a relay keeps it
	}
	switch {
	case errors.Is(err, ErrTimeout):
		return classTimeout
	case errors.Is(err, ErrPeerClosed):
		return classPeerClosed
	case errors.Is(err, ErrProtocol):
		return classProtocol
	case errors.Is(err, ErrMismatch):
		return classMismatch
	}
	return classAborted
}

func classError(class wire.Class) error {
	switch class {
	case classTimeout:
		return ErrTimeout
	case classPeerClosed:
		return ErrPeerClosed
	case classProtocol:
		return ErrProtocol
	case classMismatch:
		return ErrMismatch
	}
	return ErrAborted
}

// PeerReport is the cause of an abort that a peer reported: rank From
// aborted blaming rank Culprit (world ranks) for a failure of the class
// that Unwrap returns (ErrTimeout, ErrPeerClosed, ErrProtocol, ErrMismatch
// or ErrAborted).
type PeerReport struct {
	From, Culprit int
	class         wire.Class
	detail        string
	fps           [2]fingerprint // a mismatch's two fingerprints, passed on as they came
	witness       int            // the rank whose call is fps[0] (From, unless relayed)
}

func (e *PeerReport) Error() string {
	if e.class == classCancelled {
		s := fmt.Sprintf("rank %d cancelled its call (its caller's context ended); the call cannot complete without it", e.Culprit)
		if e.From != e.Culprit {
			s += fmt.Sprintf(" (heard from rank %d)", e.From)
		}
		return s
	}
	s := fmt.Sprintf("rank %d aborted blaming rank %d: %v", e.From, e.Culprit, classError(e.class))
	if e.From == e.Culprit {
		s = fmt.Sprintf("rank %d aborted (%v)", e.From, classError(e.class))
	}
	if e.detail != "" {
		s += ": " + e.detail
	}
	return s
}

func (e *PeerReport) Unwrap() error { return classError(e.class) }

// listen posts an abort-notice receive from every peer with a link, and
// from each peer whose link comes up later (internal/notice), and starts
// the goroutine that adopts the first verdict. It ends when the endpoint
// closes.
func (c *Comm) listen() {
	sh := c.shared
	sh.notices = notice.New(sh.ep, sh.counts.Endpoint, tagAbortNotice, noticeLen, func(q int) { c.heard(q) })
	sh.notices.Start()
}

// heard adopts world rank q's verdict if its notice has arrived, and
// reports whether it had. It is safe to call more than once, on the world
// communicator or any group of it.
func (c *Comm) heard(q int) bool {
	sh := c.shared
	nr := sh.notices.Get(q)
	if nr == nil {
		return false
	}
	r := nr.Req
	select {
	case <-r.Done():
	default:
		return false
	}
	if r.Err() != nil {
		return false
	}
	nt, _ := wire.ParseNotice(nr.Buf) // posted with NoticeLen bytes, and the receive succeeded
	if nt.Class == classLeft {
		sh.leftAfter(q, nt.Calls)
		return true
	}
	rep := &PeerReport{From: q, Culprit: nt.Culprit, class: nt.Class}
	if rep.Culprit < 0 || rep.Culprit >= sh.ep.Size() {
		rep.Culprit = q // blames no one: name the rank that gave up
	}
	wfp, cfp := nt.FPs[0], nt.FPs[1]
	if rep.class == classMismatch {
		rep.witness = nt.Witness
		if rep.witness < 0 || rep.witness >= sh.ep.Size() {
			rep.witness = q
		}
		if wfp[0] == 'G' || cfp[0] == 'G' { // else a mismatch without fingerprints (a wrong length)
			rep.detail = fmt.Sprintf("rank %d called %v, rank %d called %v", rep.witness, wfp, rep.Culprit, cfp)
		}
		rep.fps = nt.FPs
	}
	name := rep.Culprit
	switch {
	case rep.class == classMismatch:
		// Name the rank whose call differs from this rank's, never the
		// relayer: the notice says who saw what (abort_verdict.go).
		if name = c.blameMismatch(rep.witness, rep.Culprit, wfp, cfp); name == sh.ep.Rank() {
			name = q
		}
	case name == sh.ep.Rank():
		name = q // blames this rank: from here, q is who gave up on us
	}
	// Pass the verdict on as it came: a rank waiting on this one must not
	// take this rank's departure for the fault.
	f := fault{cause: rep, blame: name, lost: true, tell: rep.Culprit, relay: true}
	if rep.class == classMismatch {
		f.notice = &blamed{world: -1, mismatch: true, from: q,
			witness: rep.witness, culprit: rep.Culprit, witnessFP: wfp, culpFP: cfp}
	}
	c.fail(f)
	return true
}

// awaitNotice waits, up to d, until world rank q's notice has arrived or
// q's link has failed (the transport fails a posted receive only after
// everything q sent before has been delivered), and adopts q's verdict if
// it sent one. It reports whether it had.
func (c *Comm) awaitNotice(q int, d time.Duration) bool {
	nr := c.shared.notices.Get(q)
	if nr == nil {
		return false // no link: no notice can come
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-nr.Req.Done():
	case <-t.C:
	}
	return c.heard(q)
}

// notify tells every peer that this rank aborts blaming world rank culprit
// (this rank itself when it is the one giving up) for err, waits briefly
// for the notices to leave, and closes the endpoint.
func (c *Comm) notify(culprit int, err error) {
	nt := wire.Notice{Culprit: culprit, Class: classOf(err)}
	var me *mismatchError
	var rep *PeerReport
	switch {
	case errors.As(err, &me):
		nt.Witness, nt.FPs = c.shared.ep.Rank(), [2]fingerprint{me.mine, me.theirs}
	case errors.As(err, &rep):
		nt.Witness, nt.FPs = rep.witness, rep.fps
	}
	var b [noticeLen]byte
	nt.Encode(b[:])
	c.tellAll(b[:])
	c.closeEndpoint()
}

// tellAll sends every peer it holds a link to a notice on the notice tag
// and waits, up to 100 ms, for the sends to leave. With links on demand
// (WithConnect("lazy")) that is not every peer: a rank that hears an
// abort notice passes it on to its own links before it closes (heard),
// and the links that exist always include a ring through every rank, so
// the verdict floods to all (docs/ARCHITECTURE.md, "Failures with lazy
// links"); a leave notice needs to reach only the peers that will wait on
// the leaver, which hold a link to it by then or learn of its departure
// when they dial it.
func (c *Comm) tellAll(b []byte) {
	sh := c.shared
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	lk, _ := sh.counts.Endpoint.(transport.Linker)
	var sent []transport.Request
	for q := range sh.ep.Size() {
		if q != sh.ep.Rank() && (lk == nil || lk.Linked(q)) {
			sent = append(sent, sh.ep.Isend(q, tagAbortNotice, b))
		}
	}
	for _, r := range sent {
		r.Wait(ctx)
	}
}

// stallGrace is how long a timed-out rank listens for the wait notices of
// the others before it names the culprit.
func stallGrace(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 100*time.Millisecond), time.Second)
}

// blameStall follows the chain of waits from ge.Peer, the group rank this
// rank timed out waiting on, and returns ge naming the end of the chain.
func (c *Comm) blameStall(ge *Error) *Error {
	sh := c.shared
	if ge.Peer < 0 || ge.Peer >= len(c.ranks) {
		return ge
	}
	waits := notice.AskWaits(sh.ep, tagWaitNotice, c.ranks[ge.Peer], stallGrace(c.opts.timeout))
	if lost := sh.lost.Load(); lost >= 0 {
		// Someone reached a verdict first (or a link broke): take it.
		return c.renamed(ge, int(lost), "")
	}
	end, chain, ok := notice.Chain(waits, sh.ep.Rank())
	if !ok {
		return ge // the waits loop: no rank stands out, name the direct peer
	}
	words := make([]string, len(chain))
	for i, r := range chain {
		words[i] = fmt.Sprint(r)
	}
	return c.renamed(ge, end, "waits "+strings.Join(words, " -> "))
}

// renamed returns a copy of ge naming world rank culprit, with how the
// blame was found in the message.
func (c *Comm) renamed(ge *Error, culprit int, how string) *Error {
	g := slices.Index(c.ranks, culprit)
	if g == ge.Peer {
		return ge
	}
	e := *ge
	e.Peer, e.Dir = g, ""
	if how != "" {
		e.Err = fmt.Errorf("%w (%s: rank %d stopped answering)", ge.Err, how, culprit)
	}
	return &e
}
