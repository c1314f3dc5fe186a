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
type callCtx struct {
	parent context.Context
	start  time.Duration // when init ran, as time since epoch
	end    time.Duration // the deadline, as time since epoch
	mu     sync.Mutex    // arming
	armed  atomic.Pointer[armedCtx]
}

// epoch anchors callCtx's clock. time.Since(epoch) reads the monotonic
// clock alone, one vDSO call, where time.Now reads the wall clock too:
// half the clock's cost, which is a tenth of an 8-byte allreduce on the
// board (BENCHMARKS.md).
var epoch = time.Now()

// sinceEpoch is the monotonic time now, as time since epoch.
func sinceEpoch() time.Duration { return time.Since(epoch) }

// epochUnix is epoch in Unix nanoseconds: a time since epoch plus it is
// the wall clock's reading then, as the flight recorder keeps times.
var epochUnix = epoch.UnixNano()

// startUnix is when init ran, in Unix nanoseconds.
func (c *callCtx) startUnix() int64 { return epochUnix + int64(c.start) }

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

func (c *callCtx) Deadline() (time.Time, bool) { return epoch.Add(c.end), true }

func (c *callCtx) Done() <-chan struct{} { return c.arm().Done() }

func (c *callCtx) Err() error {
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
