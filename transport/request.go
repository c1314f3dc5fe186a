package transport

import (
	"context"
	"sync/atomic"
)

// closedChan is what Done returns for every request that completed
// before anyone asked for its channel, so that requests which complete
// without a waiter parked on them allocate no channel.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// completeMark in Req.wake says the request is complete.
var completeMark = &closedChan

// Req is a reusable Request implementation for transports: the error it
// completed with and, made only when someone has to wait for it, a done
// channel. The zero value is not usable; make one with NewRequest or
// Completed.
//
// A Req itself is never recycled: a caller may keep a Request and call Err
// long after it completed. Receives posted through a Matcher are recycled
// once their owner says it is done with them (Release).
type Req struct {
	claimed atomic.Bool // a Complete call took it
	// wake is nil while pending with no channel made, a pointer to the
	// done channel once Done made one, and completeMark once complete.
	// Swapping in completeMark is the completer's last touch of the Req.
	wake atomic.Pointer[chan struct{}]
	err  error // written before wake becomes completeMark
}

var _ Request = (*Req)(nil)

// NewRequest returns a pending request.
func NewRequest() *Req {
	return new(Req)
}

// okReq is the request every Completed(nil) returns.
var okReq = func() *Req {
	r := new(Req)
	r.claimed.Store(true)
	r.wake.Store(completeMark)
	return r
}()

// Completed returns a request that has already completed with err. For a
// nil err it returns one shared request and allocates nothing.
func Completed(err error) *Req {
	if err == nil {
		return okReq
	}
	r := &Req{err: err}
	r.claimed.Store(true)
	r.wake.Store(completeMark)
	return r
}

// Complete finishes the request with err (nil for success). Only the first
// call has an effect; it reports whether this call was the one. Once it
// returns, the caller must not touch the request again (its owner may
// already have released it for reuse).
func (r *Req) Complete(err error) bool {
	if !r.claimed.CompareAndSwap(false, true) {
		return false
	}
	r.err = err
	if c := r.wake.Swap(completeMark); c != nil {
		close(*c)
	}
	return true
}

// done reports whether the request is complete.
func (r *Req) done() bool { return r.wake.Load() == completeMark }

// IsDone reports whether the request is complete. Unlike a look at Done,
// it makes no channel.
func (r *Req) IsDone() bool { return r.done() }

// Wait blocks until the request completes or ctx ends. If ctx ends first it
// returns ctx.Err() and the request stays pending.
func (r *Req) Wait(ctx context.Context) error {
	if r.done() {
		return r.err
	}
	select {
	case <-r.Done():
		return r.err
	case <-ctx.Done():
		// Prefer a completion that raced with the cancellation.
		if r.done() {
			return r.err
		}
		return ctx.Err()
	}
}

// Done is closed when the request completes. The first call on a pending
// request makes the channel.
func (r *Req) Done() <-chan struct{} {
	for {
		if c := r.wake.Load(); c != nil {
			return *c
		}
		c := make(chan struct{})
		if r.wake.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// Err returns nil while the request is pending or succeeded, else the error
// it failed with.
func (r *Req) Err() error {
	if r.done() {
		return r.err
	}
	return nil
}

// Releaser is an optional capability of a Request: Release says its
// owner is done with it, so the transport may reuse it for a later
// operation. Call it at most once, after the last Wait, Done or Err, and
// only from the goroutine that owns the request. Releasing a request that
// is still pending (a Wait cancelled by its context) is allowed and
// reuses nothing: it is left to the garbage collector once it completes.
type Releaser interface {
	Release()
}

// Release releases r if it implements Releaser, else does nothing.
func Release(r Request) {
	if rr, ok := r.(Releaser); ok {
		rr.Release()
	}
}
