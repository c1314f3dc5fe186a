package goccl

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// callCtx is the context a call runs under: the caller's, ending at the
// communicator's timeout at the latest. It is context.WithTimeout without
// its cost where nothing waits: WithTimeout makes a timer, a channel and
// two closures per call, a third of an 8-byte allreduce's time on the
// board. callCtx makes them only when someone asks for Done (a wait that
// parks); a call whose waits all end while spinning reads the clock once,
// at its start, and allocates nothing (it lives in the call).
//
// Until then Err reads the parent's Err and the clock. Once armed it is a
// context.WithDeadline of the parent, which Done, Err and Value answer
// for, so that a context derived from it (WithCancel in rootChecked) finds
// the standard cancelCtx underneath and attaches to it without a
// goroutine.
//
// A call on the board starts its context late (prepare, then begin):
// only if something waits on it, or asks for its deadline. A call that
// finds every peer's slot on the board within its polls reads no
// monotonic clock at all (call_board.go): the clock is on the path of the last
// rank to arrive, which every other rank waits for. Its timeout then
// counts from its first wait, a few microseconds after its start at most.
// Until begin, the context has no start and no deadline; its owner begins
// it before anything waits on it.
type callCtx struct {
	parent  context.Context
	start   time.Duration // when the context began, as time since epoch
	end     time.Duration // the deadline, as time since epoch
	timeout time.Duration // prepare's, until begin
	pending bool          // prepared, not yet begun
	mu      sync.Mutex    // arming
	armed   atomic.Pointer[armedCtx]
}

// epoch anchors callCtx's clock. time.Since(epoch) reads the monotonic
// clock alone, one vDSO call, where time.Now reads the wall clock too:
// half the clock's cost, which is a tenth of an 8-byte allreduce on the
// board (BENCHMARKS.md).
var epoch = time.Now()

// sinceEpoch is the monotonic time now, as time since epoch.
func sinceEpoch() time.Duration { return time.Since(epoch) }

type armedCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

var _ context.Context = (*callCtx)(nil)

// init starts the context at now: it ends when parent does or timeout
// from now, whichever comes first.
func (c *callCtx) init(parent context.Context, timeout time.Duration) {
	c.parent = parent
	now := sinceEpoch()
	c.start, c.end = now, now+timeout
	if c.end < now { // a timeout of centuries
		c.end = math.MaxInt64
	}
	if d, ok := parent.Deadline(); ok {
		c.end = min(c.end, d.Sub(epoch))
	}
}

// prepare is init without the clock: the context begins at begin.
func (c *callCtx) prepare(parent context.Context, timeout time.Duration) {
	c.parent, c.timeout, c.pending = parent, timeout, true
}

// begin starts a prepared context now; it does nothing to one that has
// begun.
func (c *callCtx) begin() {
	if c.pending {
		c.pending = false
		c.init(c.parent, c.timeout)
	}
}

func (c *callCtx) arm() context.Context {
	if a := c.armed.Load(); a != nil {
		return a.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.armed.Load(); a != nil {
		return a.ctx
	}
	ctx, cancel := context.WithDeadline(c.parent, epoch.Add(c.end))
	c.armed.Store(&armedCtx{ctx: ctx, cancel: cancel})
	return ctx
}

func (c *callCtx) Deadline() (time.Time, bool) {
	c.begin()
	return epoch.Add(c.end), true
}

func (c *callCtx) Done() <-chan struct{} {
	c.begin()
	return c.arm().Done()
}

func (c *callCtx) Err() error {
	c.begin()
	if a := c.armed.Load(); a != nil {
		return a.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if sinceEpoch() >= c.end {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *callCtx) Value(key any) any {
	if a := c.armed.Load(); a != nil {
		return a.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// release frees what arming made (WithTimeout's cancel).
func (c *callCtx) release() {
	if a := c.armed.Load(); a != nil {
		a.cancel()
	}
}
