package transport

import (
	"context"
	"sync/atomic"
)

// Request states.
const (
	reqPending uint32 = iota
	reqCompleting
	reqDone
)

// closedChan is shared by every request that is complete when it is made,
// so that the fast path allocates no channel.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Req is a reusable Request implementation for transports: a done channel
// and the error it completed with. The zero value is not usable; make one
// with NewRequest or Completed.
//
// Req objects are not pooled: a caller may keep a Request and call Err long
// after it completed, so recycling would hand it someone else's result. The
// cost of one is one small struct and one channel.
type Req struct {
	state atomic.Uint32
	done  chan struct{}
	err   error
}

var _ Request = (*Req)(nil)

// NewRequest returns a pending request.
func NewRequest() *Req {
	return &Req{done: make(chan struct{})}
}

// Completed returns a request that has already completed with err. It
// allocates no channel.
func Completed(err error) *Req {
	r := &Req{done: closedChan, err: err}
	r.state.Store(reqDone)
	return r
}

// Complete finishes the request with err (nil for success). Only the first
// call has an effect; it reports whether this call was the one.
func (r *Req) Complete(err error) bool {
	if !r.state.CompareAndSwap(reqPending, reqCompleting) {
		return false
	}
	r.err = err
	r.state.Store(reqDone)
	close(r.done)
	return true
}

// Wait blocks until the request completes or ctx ends. If ctx ends first it
// returns ctx.Err() and the request stays pending.
func (r *Req) Wait(ctx context.Context) error {
	if r.state.Load() == reqDone {
		return r.err
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		// Prefer a completion that raced with the cancellation.
		if r.state.Load() == reqDone {
			return r.err
		}
		return ctx.Err()
	}
}

// Done is closed when the request completes.
func (r *Req) Done() <-chan struct{} { return r.done }

// Err returns nil while the request is pending or succeeded, else the error
// it failed with.
func (r *Req) Err() error {
	if r.state.Load() == reqDone {
		return r.err
	}
	return nil
}
