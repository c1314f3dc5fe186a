package backend

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
)

// Links is what a Group needs of goccl's own links, which the ranks keep
// beside the backend's: the endpoint Init connected and this group's
// place in it.
type Links struct {
	EP    transport.Endpoint
	ID    uint64 // the group's id (the world's is 0)
	Rank  int    // this rank in the group
	Ranks []int  // group rank -> endpoint rank
	// Check: compare every call's fingerprint across the group (the
	// mismatch check is on).
	Check bool
	// Mismatch is told when the previous rank of the ring (group rank
	// peer) made call theirs where this rank made mine; the root aborts
	// the communicator with ErrMismatch naming both.
	Mismatch func(peer int, mine, theirs *wire.Fingerprint)
	// Broken is told when group rank peer sent what goccl never sends
	// (transport.ErrProtocol); the root aborts the communicator.
	Broken func(peer int, err error)
	// Fatal, if not nil, reports the error of a blocking call whose
	// watchdog is ending the job (Blocker); nil: standard error.
	Fatal func(err error)
}

// ErrStopped is Run's error when the communicator was aborted under the
// call (stop was closed): the root reports the abort's cause.
var ErrStopped = errors.New("backend: the communicator was aborted under the call")

// PeerError is a backend call's failure blamed on group rank Peer.
type PeerError struct {
	Peer int
	Err  error
}

func (e *PeerError) Error() string { return e.Err.Error() }
func (e *PeerError) Unwrap() error { return e.Err }

// Group is a backend communicator with goccl's guarantees around it: its
// calls issued in their order, polled under the deadline, checked
// against the other ranks' fingerprints.
type Group struct {
	be    Comm
	links Links
	w     *world
	next  atomic.Uint64 // Order of the next call to issue
	// issued counts the calls ordered (Next): the last call number this
	// rank has issued, which the search for the rank behind exchanges.
	issued atomic.Uint64
	// The fingerprints' way to the ring (guard.go): pending, queued by
	// the calls and sent in batches; flush sends a batch that waits too
	// long, flushSet says it is set.
	fpMu     sync.Mutex
	pending  []wire.Fingerprint
	flush    *time.Timer
	flushSet bool
	mu       sync.Mutex         // mine
	mine     []wire.Fingerprint // this rank's fingerprints the previous rank's have not met yet
	more     chan struct{}      // mine grew
	stop     context.CancelFunc
	ctx      context.Context
	wd       watchdog              // blocking calls (block.go)
	differ   atomic.Pointer[error] // the difference the ring found, if it did
}

// world is what the groups of one job share: the answerer of the
// questions about the rank behind, and whether a call was abandoned.
type world struct {
	ep      transport.Endpoint
	groups  sync.Map // group id -> *Group
	broken  atomic.Bool
	mu      sync.Mutex
	answers map[answerKey]uint64
	ctx     context.Context
	cancel  context.CancelFunc
}

type answerKey struct {
	group uint64
	from  int // endpoint rank
}

// NewWorld wraps the world communicator be (from Open) over links; nil
// for none.
func NewWorld(be Comm, l Links) *Group {
	if be == nil {
		return nil
	}
	w := &world{ep: l.EP, answers: map[answerKey]uint64{}}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	g := newGroup(be, w)
	g.Attach(l)
	w.answer()
	return g
}

func newGroup(be Comm, w *world) *Group {
	g := &Group{be: be, w: w, more: make(chan struct{}, 1)}
	g.flush = time.AfterFunc(time.Hour, g.flushPending)
	g.flush.Stop()
	g.next.Store(1)
	g.ctx, g.stop = context.WithCancel(w.ctx)
	return g
}

// Attach gives a group from Split its links, once its communicator is
// made; nil does nothing.
func (g *Group) Attach(l Links) {
	if g == nil {
		return
	}
	g.links = l
	g.w.groups.Store(l.ID, g)
	if lk, ok := g.be.(Linked); ok {
		lk.Link(l)
	}
	if l.Check && len(l.Ranks) > 1 {
		go g.compare()
	}
}

// Name is the backend's name.
func (g *Group) Name() string { return g.be.Name() }

// Takes reports whether the backend runs c.
func (g *Group) Takes(c *Call) bool { return g.be.Takes(c) }

// Memory says which buffers the backend takes.
func (g *Group) Memory() Memory { return g.be.Memory() }

// Take copies c into dst, which the call carries (the root's pooled
// record of it), and returns dst where the backend runs c; nil, and dst
// zeroed, where goccl's own path does. (Asked of c itself, Takes would
// move every call's c to the heap.)
func (g *Group) Take(dst *Call, c Call) *Call {
	*dst = c
	if !g.be.Takes(dst) {
		*dst = Call{}
		return nil
	}
	return dst
}

// For names the library a call like c runs on: the backend's name where
// it takes c, else "goccl" (nil g: no backend). c is a probe, never
// issued: a call on host memory (Send, Recv) or on device memory
// (SendDev, RecvDev). A probe without buffers is asked for host memory
// in general: the backend's name where it takes host buffers. For the
// collectives of two buffers the probe's Recv (RecvDev) is the receive
// buffer and the send buffer is taken to be apart from it. A backend of
// host memory only names itself for a device buffer: it refuses the
// call (ErrInvalid), goccl does not run it.
func (g *Group) For(c Call) string {
	dev := c.SendDev != nil || c.RecvDev != nil
	switch {
	case g == nil, !dev && g.Memory()&Host == 0:
		return string(Goccl)
	case dev && g.Memory()&Device == 0, !dev && c.Send == nil && c.Recv == nil:
		return g.Name()
	}
	if !c.Coll.inPlace() {
		c.Send, c.SendDev = nil, nil
	}
	if g.be.Takes(&c) {
		return g.Name()
	}
	return string(Goccl)
}

// Next returns the Order of a call being ordered now; the root calls it
// under the lock that orders its calls.
func (g *Group) Next() uint64 { return g.issued.Add(1) }

// Split makes the group of the ranks that pass color (negative: none,
// nil returned), ordered by key; a collective over g. Attach gives it
// its links.
func (g *Group) Split(color, key int) (*Group, error) {
	be, err := g.be.Split(color, key)
	if err != nil || be == nil {
		return nil, err
	}
	return newGroup(be, g.w), nil
}

// SplitOf is Split for the group of members (ranks of g, the same list
// on every member), this rank being members[me]; me < 0: not a member.
func (g *Group) SplitOf(members []int, me int) (*Group, error) {
	if g == nil {
		return nil, nil // no backend: the new group has none either
	}
	if me < 0 {
		return g.Split(-1, 0)
	}
	return g.Split(members[0], me)
}

// Close frees g. The world's Close ends the job with the backend's Abort
// if a call was abandoned (a deadline, an abort under a call): MPI offers
// no way to take back a collective in flight.
func (g *Group) Close() error {
	g.stop()
	g.flush.Stop()
	if g.links.ID != 0 {
		if g.w.broken.Load() {
			return nil
		}
		return g.be.Close()
	}
	g.w.cancel()
	if g.w.broken.Load() {
		g.be.Abort(1)
	}
	return g.be.Close()
}

// Post issues a Send or Recv now, for Run to wait on: messages of one tag
// between two ranks match in the order they were posted.
func (g *Group) Post(c *Call) error {
	r, err := g.be.Start(c)
	c.req = r
	return err
}

// Run issues c in its order and polls it until it completes, ctx ends
// (a *PeerError wrapping context.DeadlineExceeded names the rank behind)
// or stop is closed (ErrStopped); a call the backend blocks on (Blocker)
// runs to its end under the watchdog instead. fp is the call's
// fingerprint, compared with the other ranks' off the call's path; nil:
// no check. Avg on host memory runs as Sum, divided by the group's size
// after; on device memory the backend maps it (ncclAvg, or Sum and a
// scale on its stream). A request whose wait ends unfinished is
// cancelled (Canceler). Run leaves c zeroed: the caller's pooled record
// of the call keeps no buffer.
func (g *Group) Run(ctx context.Context, c *Call, fp *wire.Fingerprint, stop <-chan struct{}) error {
	defer func() { *c = Call{} }()
	avg := c.Op == reduceop.Avg && c.RecvDev == nil && c.SendDev == nil
	if avg {
		c.Op = reduceop.Sum
	}
	if b, ok := g.be.(Blocker); ok && c.req == nil && b.Blocks(c) {
		err := g.block(ctx, b, c, fp, stop)
		if c.Issued != nil {
			close(c.Issued)
		}
		if err != nil {
			return err
		}
	} else if err := g.await(ctx, c, fp, stop); err != nil {
		return err
	}
	if avg && (c.Coll != Reduce || c.Root == g.links.Rank) {
		return (reduceop.Host{}).Scale(c.DType, c.Recv, len(g.links.Ranks))
	}
	return nil
}

// await issues c in its order and polls it until it completes.
func (g *Group) await(ctx context.Context, c *Call, fp *wire.Fingerprint, stop <-chan struct{}) error {
	r, err := g.issue(ctx, c, fp, stop)
	if c.Issued != nil {
		close(c.Issued)
	}
	if err != nil {
		return err
	}
	if err := poll(ctx, r, stop); err != nil {
		g.w.broken.Store(true)
		err = g.failed(ctx, err)
		if cr, ok := r.(Canceler); ok { // after the search for the rank behind, which asks the others
			cr.Cancel()
			err = cancelled(err, g.be.Name())
		}
		return err
	}
	return nil
}

// issue issues c in its order (a Post'ed one is issued already).
func (g *Group) issue(ctx context.Context, c *Call, fp *wire.Fingerprint, stop <-chan struct{}) (Request, error) {
	if err := g.order(ctx, c, fp, stop); err != nil {
		return nil, err
	}
	r, err := c.req, error(nil)
	if r == nil {
		r, err = g.be.Start(c)
	}
	if c.Order > 0 {
		g.next.Add(1)
	}
	return r, err
}

// order waits for c's turn among the group's calls and queues its
// fingerprint for the ring (Send, Recv and Post'ed calls have no Order).
func (g *Group) order(ctx context.Context, c *Call, fp *wire.Fingerprint, stop <-chan struct{}) error {
	if c.Order == 0 {
		return nil
	}
	if err := g.turn(ctx, c.Order, stop); err != nil {
		return g.failed(ctx, err)
	}
	if fp != nil && g.links.Check && len(g.links.Ranks) > 1 {
		g.queue(fp)
	}
	return nil
}

// cancelled adds to err that the backend's communicator was aborted,
// keeping a PeerError's peer.
func cancelled(err error, name string) error {
	if pe := (*PeerError)(nil); errors.As(err, &pe) {
		return &PeerError{Peer: pe.Peer, Err: fmt.Errorf("%w (%w: the %s communicator)", pe.Err, ErrAborted, name)}
	}
	return fmt.Errorf("%w (%w: the %s communicator)", err, ErrAborted, name)
}

// failed turns a wait that ended into Run's error: at the deadline, the
// rank behind.
func (g *Group) failed(ctx context.Context, err error) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	peer, why := g.behind()
	return &PeerError{Peer: peer, Err: fmt.Errorf("%w: backend %s: %s (a job whose %s call timed out cannot go on: Close ends it)",
		err, g.be.Name(), why, g.be.Name())}
}

// turn waits until the call of order o is the next to issue.
func (g *Group) turn(ctx context.Context, o uint64, stop <-chan struct{}) error {
	for i := 0; g.next.Load() != o; i++ {
		if err := check(ctx, stop, i); err != nil {
			return err
		}
		backoff(i)
	}
	return nil
}

// poll tests r until it completes, ctx ends or stop is closed.
func poll(ctx context.Context, r Request, stop <-chan struct{}) error {
	for i := 0; ; i++ {
		done, err := r.Test()
		if done {
			return err
		}
		if err := check(ctx, stop, i); err != nil {
			return err
		}
		backoff(i)
	}
}

// check reads ctx and stop every 64th round of a wait.
func check(ctx context.Context, stop <-chan struct{}, i int) error {
	if i&63 != 63 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-stop:
		return ErrStopped
	default:
		return nil
	}
}

// backoff: a wait spins first (a small call completes in microseconds),
// then yields between tests, and never sleeps: a library's nonblocking
// collectives progress only inside Test (Open MPI's do), so a sleep
// between tests stretches every round of a large one (a 64 MiB allreduce
// over MPI took 1.7 times vader's own with tests 50 us apart), and the
// library's own blocking calls poll the same way. A rank that shares its
// core with others yields it through the library (Open MPI's
// mpi_yield_when_idle), not through us.
func backoff(i int) {
	if i >= 256 {
		runtime.Gosched()
	}
}
