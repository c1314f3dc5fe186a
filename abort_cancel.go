package goccl

import (
	"errors"
	"fmt"
)

// Cancelling, as users of torch.distributed and NCCL expect it:
//
//   - A call whose context has ended before it starts takes no place in
//     the order of calls and sends nothing: it returns the context's error
//     wrapped in an *Error, and the communicator stays usable. (For an
//     async call, "starts" is the Async method's return.)
//   - A call cancelled while it runs may have messages in flight, and its
//     peers cannot finish it without this rank: the communicator is
//     aborted (the error says so and wraps both context.Canceled and
//     ErrAborted), and the peers' errors name this rank and say that it
//     cancelled, not that it failed.
//
// A deadline on the caller's context is not a cancel: when it ends first
// the call fails with ErrTimeout and the stalled rank is named, as with
// the communicator's own timeout.

// cancelError is a call cancelled by its caller while it ran.
type cancelError struct{ cause error }

func (e *cancelError) Error() string {
	return fmt.Sprintf("%v: cancelled by the caller while its messages may be in flight; the communicator is aborted and the peers are told", e.cause)
}

func (e *cancelError) Unwrap() error { return e.cause }

// notStarted is the error of a call whose context ended before it took
// its place in the order of calls.
func (k *call) notStarted(err error) error { return k.c.notStarted(k.op, err) }

// notStarted is the error of a call of op whose context ended before it
// posted anything.
func (c *Comm) notStarted(op string, err error) error {
	return &Error{Op: op, Rank: c.rank, Peer: -1,
		Err: fmt.Errorf("%w: the call did not start; nothing was sent and the communicator is usable", err)}
}

// cancelled is the error of a call cancelled while it ran: cause is the
// caller's context's error, failed what the call returned when the
// context ended, whose peer it keeps where it names one.
func (k *call) cancelled(cause, failed error) error {
	e := &Error{Op: k.op, Rank: k.c.rank, Peer: -1, Err: &cancelError{cause}}
	if ge := (*Error)(nil); errors.As(failed, &ge) && ge.Peer >= 0 {
		e.Peer, e.Dir = ge.Peer, ge.Dir
	}
	return e
}
