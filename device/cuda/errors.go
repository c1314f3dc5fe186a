package cuda

import "errors"

// Errors this package wraps, so that callers can tell misuse apart with
// errors.Is. They are declared here rather than taken from package goccl,
// which imports packages that device code must not depend on; goccl maps
// them to its own errors where it reports them.
var (
	// ErrInvalid is wrapped by every error about an argument: a nil or
	// foreign buffer, stream or event, a dtype or operation the kernels do
	// not support, a range outside a buffer, host memory not from
	// AllocHost, or a pointer passed to Wrap that is not device memory of
	// this device. Such errors are returned before anything is enqueued.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed is wrapped by every call on a Context after Close, and on
	// the buffers, streams and events made from it.
	ErrClosed = errors.New("context closed")
)
