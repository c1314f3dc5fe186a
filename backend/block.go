package backend

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/wire"
)

// Blocker is a Comm whose collectives can also run to their end in the
// calling thread: MPI's blocking calls, which Open MPI runs with other and
// faster algorithms than its nonblocking ones (BENCHMARKS.md). Group
// runs a call on Block where Blocks says so, else on Start and polls it.
type Blocker interface {
	// Blocks reports whether c runs on Block.
	Blocks(c *Call) bool
	// Block runs c to its end.
	Block(c *Call) error
}

// watchdog stands beside a group's blocking calls, which can neither be
// left at their deadline nor taken back: if a call's context ends, or
// the communicator is aborted (stop), while the call is still in the
// library, it names the rank behind as a polled call's error would,
// reports the error (Links.Fatal) and ends the job with the backend's
// Abort, as a job whose call was abandoned must end anyway (Close would).
// A group's calls run one at a time, in their order, so one watchdog
// serves them all.
//
// A call costs it a lock and a look at its deadline, not a timer of its
// own: the timer is set for the first call's deadline, or checkEvery,
// whichever comes first, and again only for a call whose deadline comes
// before that; when it goes off it looks at the call in the library then
// (usually a later one) and sets itself for that call, while calls keep
// coming. So a call's deadline is seen on time, and a cancelled context
// within checkEvery.
type watchdog struct {
	mu      sync.Mutex
	in      *Call           // the call in the library; nil between calls
	ctx     context.Context // in's
	timer   *time.Timer
	armedAt time.Time // when timer goes off; zero: it is not set
	fired   error     // what the watchdog reported, once it has
	once    sync.Once
}

// checkEvery bounds how long a blocking call's cancelled context goes
// unseen.
const checkEvery = 100 * time.Millisecond

// block runs c on b in its order, under the watchdog.
func (g *Group) block(ctx context.Context, b Blocker, c *Call, fp *wire.Fingerprint, stop <-chan struct{}) error {
	if err := g.order(ctx, c, fp, stop); err != nil {
		return err
	}
	if c.Order > 0 {
		defer g.next.Add(1) // the next call's turn comes once this one has returned
	}
	wd := &g.wd
	wd.once.Do(func() {
		wd.timer = time.AfterFunc(time.Hour, g.tick)
		wd.timer.Stop()
		go g.watchStop(stop)
	})
	wd.mu.Lock()
	select {
	case <-stop:
		wd.mu.Unlock()
		return ErrStopped
	default:
	}
	if err := ctx.Err(); err != nil {
		wd.mu.Unlock()
		return g.failed(ctx, err)
	}
	wd.in, wd.ctx = c, ctx
	if dl, ok := ctx.Deadline(); wd.armedAt.IsZero() || ok && dl.Before(wd.armedAt) {
		wd.arm(ctx) // not set, or set for later than this call's deadline
	}
	wd.mu.Unlock()
	err := b.Block(c)
	wd.mu.Lock()
	wd.in, wd.ctx = nil, nil
	if wd.fired != nil { // the job is ending (a backend whose Abort returned)
		err = wd.fired
	}
	wd.mu.Unlock()
	return err
}

// arm sets the timer for ctx's deadline or checkEvery from now, whichever
// comes first. wd.mu is held.
func (wd *watchdog) arm(ctx context.Context) {
	at := time.Now().Add(checkEvery)
	if dl, ok := ctx.Deadline(); ok && dl.Before(at) {
		at = dl
	}
	wd.armedAt = at
	wd.timer.Reset(time.Until(at))
}

// tick is the timer going off: the call in the library, if any, is
// looked at, and the timer set again for it.
func (g *Group) tick() {
	wd := &g.wd
	wd.mu.Lock()
	defer wd.mu.Unlock()
	wd.armedAt = time.Time{}
	if wd.in == nil {
		return // the timer is set again by the next call
	}
	if err := wd.ctx.Err(); err != nil {
		g.fire(err)
		return
	}
	wd.arm(wd.ctx)
}

// watchStop fires the watchdog on the call in the library, if any, when
// the communicator is aborted (stop, the same channel for every call of
// the group).
func (g *Group) watchStop(stop <-chan struct{}) {
	select {
	case <-stop:
		g.wd.mu.Lock()
		defer g.wd.mu.Unlock()
		if g.wd.in != nil {
			g.fire(ErrStopped)
		}
	case <-g.ctx.Done():
	}
}

// fire ends the job over the call in the library for cause: it names the
// rank behind where cause is the deadline, reports, and aborts. wd.mu is
// held.
func (g *Group) fire(cause error) {
	wd := &g.wd
	if wd.fired != nil {
		return
	}
	g.w.broken.Store(true)
	if d := g.differ.Load(); d != nil && cause == ErrStopped {
		cause = fmt.Errorf("%w: %w", cause, *d) // the abort's cause, as the ring found it here
	}
	err := g.failed(context.Background(), cause) // at the deadline: the rank behind
	err = fmt.Errorf("goccl: %s on backend %s, rank %d of group %#x: %w; the call is blocked in the library and cannot be taken back: ending the job",
		wd.in.Coll, g.be.Name(), g.links.Rank, g.links.ID, err)
	wd.fired = err
	if f := g.links.Fatal; f != nil {
		f(err)
	} else {
		fmt.Fprintln(os.Stderr, err)
	}
	g.be.Abort(1)
}
