package goccl

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/transport"
)

// Sentinel errors. A failed call returns an *Error that wraps one of them;
// test with errors.Is, and use errors.As to get the *Error with the rank of
// the peer involved.
var (
	// ErrTimeout: the call's context or the communicator's timeout ended
	// while waiting on a peer.
	ErrTimeout = errors.New("timeout")
	// ErrPeerClosed: a peer's connection closed (the process died or left).
	ErrPeerClosed = transport.ErrPeerClosed
	// ErrProtocol: a peer sent bytes that break the protocol.
	ErrProtocol = transport.ErrProtocol
	// ErrMismatch: ranks called different collectives or the same one with
	// different arguments.
	ErrMismatch = errors.New("mismatched collective")
	// ErrAborted: the communicator was aborted by an earlier failure or by
	// Abort; every later call fails with it at once.
	ErrAborted = backend.ErrAborted
	// ErrInvalid: an argument is wrong (nil or short buffer, root out of
	// range, op the dtype cannot take). Nothing was sent.
	ErrInvalid = errors.New("invalid argument")
)

// Error describes a failed call: the operation, this rank, the peer
// involved (-1 when none is), and the cause.
type Error struct {
	Op   string // the collective as the comms log names it: "all_reduce", "broadcast", ...
	Rank int    // this rank, in the communicator the call was made on
	Peer int    // the peer rank the failure concerns, or -1
	Dir  string // "<-" (receiving from Peer), "->" (sending to Peer), or ""
	Err  error
}

func (e *Error) Error() string {
	if e.Peer < 0 {
		return fmt.Sprintf("goccl: %s rank %d: %v", e.Op, e.Rank, e.Err)
	}
	if e.Dir == "" {
		return fmt.Sprintf("goccl: %s rank %d peer %d: %v", e.Op, e.Rank, e.Peer, e.Err)
	}
	return fmt.Sprintf("goccl: %s rank %d %s peer %d: %v", e.Op, e.Rank, e.Dir, e.Peer, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// invalid returns an ErrInvalid error for op on rank.
func invalid(op string, rank int, format string, args ...any) error {
	return &Error{Op: op, Rank: rank, Peer: -1, Err: fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))}
}

// timeoutErr marks context expiry as ErrTimeout while keeping the context
// error in the chain.
type timeoutErr struct{ cause error }

func (t timeoutErr) Error() string { return "timeout: " + t.cause.Error() }
func (t timeoutErr) Unwrap() []error {
	return []error{ErrTimeout, t.cause}
}

// classify turns transport and context errors into the goccl error model.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return timeoutErr{err}
	}
	return err
}
