// Package hostsim is a device (package device) on host memory, so that CI
// can test what goccl does with a GPU without one: device buffers are Go
// byte slices, streams are goroutines, and copies and kernels can be made
// to take time.
//
// # Model
//
// Buffers come from Device.Alloc (zeroed, 16-byte aligned), Device.Wrap
// (memory the caller owns; Free leaves it alone) and Buffer.Slice (a
// sub-range sharing memory). Host memory for copies comes from
// Device.AllocHost. It is plain Go memory, but the device remembers every
// range it handed out until its Free, and a copy given any other host
// memory is refused with an error wrapping ErrNotPinned: on a GPU such a
// copy runs synchronously or, with memory that moves, corrupts.
//
// Each Stream is a goroutine that runs the work enqueued on it strictly in
// order; enqueueing appends to an unbounded queue and never waits for the
// work. Copies, Reduce and Scale (with reduceop.Apply and reduceop.Scale,
// so results are bit for bit those of the host loops), Stream.Launch (any
// Go function as a kernel), Hold and WaitEvent are all work on the queue.
// An Event is a position on a stream: Record notes how much work the stream
// has been given, and the event completes when the stream has run that
// much. WaitEvent takes the event's position at the time of the call, as
// cuStreamWaitEvent does; an event never recorded is complete.
//
// Every argument is checked before anything is enqueued: ranges, dtypes,
// ops, the device a buffer or event belongs to, freed buffers, destroyed
// streams and events, host memory not from AllocHost. Errors name the
// device and the operation ("hostsim:0: stream 2: copy to host: source
// range [60,68) outside buffer of 64 bytes: range outside buffer") and wrap
// one of the sentinels ErrRange, ErrNotPinned, ErrFreed, ErrDestroyed,
// ErrForeign, ErrClosed. Misuse that only shows while work runs (a buffer
// or host memory freed while a copy of it was pending) fails the device as
// a CUDA context fails: the rest of the work is skipped and every later
// call returns the error.
//
// IPC (device.IPC) works between hostsim Devices of one process, which is
// where their memory lives, and refuses a handle from another process, so
// ranks that are goroutines copy device to device and ranks that are
// processes fall back to staging, as CUDA ranks do where IPC is refused;
// the NoIPC option refuses it within a process too. OneBitKernel runs
// onebit's per-element steps as kernels on a stream.
//
// # Time
//
// Latency, given to New, makes copies, kernels and launches sleep in their
// stream's goroutine, so that streams overlap as copy engines and
// multiprocessors do and a test can see a pipeline work. Device.StartTimeline
// makes the device record a Span per piece of work (stream, kind, name,
// start, end), so that a test can check what ran before what and what
// overlapped; Span times come from time.Now and are ordered as the work's
// happens-before edges are.
//
// # Concurrency
//
// Every method is safe for concurrent use. A wait that returns (Synchronize,
// Event.Wait) makes the memory writes of the work it waited for visible to
// the caller, so tests may read Buffer.Bytes and host memory after it under
// the race detector. Device.Close interrupts every wait with an error
// wrapping ErrClosed, drops the work not yet run, returns when no stream
// goroutine is left, and makes every later call fail.
package hostsim
