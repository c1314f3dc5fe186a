package device

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/reduceop"
)

// Device is one accelerator.
type Device interface {
	// String names the device for errors and logs, for example "cuda:0".
	String() string
	// Alloc allocates device memory for n elements of dt; its contents are
	// undefined. The caller frees it with the Buffer's Free.
	Alloc(dt reduceop.DType, n int) (Buffer, error)
	// AllocHost allocates n bytes of page-locked host memory, which the
	// device copies from and to asynchronously.
	AllocHost(n int) (Host, error)
	// NewStream creates a stream that is not ordered with any other.
	NewStream() (Stream, error)
	// NewEvent creates an event.
	NewEvent() (Event, error)
}

// Buffer is device memory holding Len elements of DType, contiguous. It is
// what goccl.DeviceBuffer names. Device returns the very Device value the
// buffer belongs to (comparable with ==: goccl keys its per-device state by
// it). Free releases memory the buffer owns and does nothing for memory it
// wraps; a Buffer must not be used after Free, and freeing memory that
// queued work still uses is a misuse whose outcome is undefined (CUDA may
// fault; hostsim fails the device).
type Buffer interface {
	DType() reduceop.DType
	Len() int
	Device() Device
	Free() error
}

// Slicer is a Buffer that lends a range of its elements as a Buffer of its
// own, sharing its memory as a Go slice expression does: Sub(lo, hi) holds
// elements [lo, hi). The sub-buffer is usable while the buffer it came from
// is, belongs to the same Device, and its Free releases nothing. Code that
// hands one part of a buffer to a kernel or a collective (onebit's
// compressed allreduce on device memory) needs it; the Buffers of
// device/cuda and device/hostsim are Slicers.
type Slicer interface {
	Buffer
	Sub(lo, hi int) (Buffer, error)
}

// ErrNotSlicer is wrapped by Sub's error for a Buffer that is not a Slicer.
var ErrNotSlicer = errors.New("device: buffer cannot lend a sub-range (not a device.Slicer)")

// Sub returns elements [lo, hi) of b as a Buffer sharing b's memory. It
// fails, naming the range, if b is not a Slicer or the range is not within
// b.
func Sub(b Buffer, lo, hi int) (Buffer, error) {
	s, ok := b.(Slicer)
	if !ok {
		return nil, fmt.Errorf("sub-range [%d,%d) of %T: %w", lo, hi, b, ErrNotSlicer)
	}
	return s.Sub(lo, hi)
}

// IPC is implemented by a Device whose memory another process on the same
// host can use directly, as CUDA IPC allows: goccl's device data path then
// copies device to device between the ranks of one host instead of
// staging through host memory, and falls back to staging when a handle is
// refused.
type IPC interface {
	// IPCExport returns a handle of at most IPCHandleMax bytes naming the
	// memory of b, a Buffer of this device.
	IPCExport(b Buffer) ([]byte, error)
	// IPCImport maps the memory a handle from IPCExport names, exported by
	// a device of the same kind in another process (or this one, where the
	// device allows), and returns it as a Buffer of this device; its Free
	// unmaps it. The exporter's memory must outlive it.
	IPCImport(handle []byte) (Buffer, error)
}

// IPCHandleMax is the most bytes an IPC handle may take.
const IPCHandleMax = 128

// Host is page-locked host memory from Device.AllocHost.
type Host interface {
	// Bytes returns the memory, valid until Free.
	Bytes() []byte
	Free() error
}

// Stream is an in-order queue of asynchronous work on one device. Every
// method but Synchronize and Destroy only enqueues: it returns before the
// work runs, and an error it returns is about the arguments or the stream,
// not the outcome. Offsets and lengths are in bytes except where named
// otherwise; a range outside a buffer is an error before anything is
// enqueued. Host memory passed to a copy must come from AllocHost and must
// stay untouched until the copy has run (wait for an event recorded after
// it).
//
// Two ranges of one call (Copy, Reduce) may be the same range but must not
// otherwise overlap. Reduce takes dst and src of one dtype, at byte offsets
// that are whole elements. A call on a destroyed stream or event, or with a
// freed buffer, should return an error where the device can tell
// (devicetest.RunMisuse checks it); CUDA cannot always.
type Stream interface {
	// CopyToHost copies len(dst) bytes of src, starting at byte off, to dst.
	CopyToHost(dst []byte, src Buffer, off int) error
	// CopyFromHost copies src to dst starting at byte off.
	CopyFromHost(dst Buffer, off int, src []byte) error
	// Copy copies n bytes from src at soff to dst at doff, on the device.
	Copy(dst Buffer, doff int, src Buffer, soff int, n int) error
	// Reduce computes dst[i] = dst[i] op src[i] for n elements of dst's
	// dtype starting at the byte offsets doff and soff, with reduceop's
	// arithmetic (Avg sums; Scale divides).
	Reduce(op reduceop.Op, dst Buffer, doff int, src Buffer, soff int, n int) error
	// Scale divides n elements of dst's dtype starting at byte off by div,
	// the last step of Avg, as reduceop.Scale does.
	Scale(dst Buffer, off int, n int, div int) error
	// Record marks the current end of the stream with e; e completes when
	// all work enqueued before it has run.
	Record(e Event) error
	// WaitEvent makes work enqueued after it wait until e completes (as of
	// e's last Record before this call; an event never recorded is
	// complete).
	WaitEvent(e Event) error
	// Hold makes work enqueued after it wait until the returned Hold is
	// released, without the host waiting on the stream.
	Hold() (Hold, error)
	// Synchronize waits until all work enqueued so far has run, or ctx
	// ends; then its error wraps ctx.Err().
	Synchronize(ctx context.Context) error
	// Destroy releases the stream after the work enqueued on it has run.
	Destroy() error
}

// Event marks a point on a stream.
type Event interface {
	// Wait blocks until the work before the event's last Record has run,
	// or ctx ends (then its error wraps ctx.Err()). An event never
	// recorded is complete.
	Wait(ctx context.Context) error
	// Done reports without blocking whether Wait would return at once.
	Done() (bool, error)
	Destroy() error
}

// Hold is a barrier placed on a stream by Stream.Hold. Release lets the
// stream run on; releasing twice is a no-op. A Hold that is never released
// stalls its stream for good, so every path of its holder must release it.
type Hold interface {
	Release()
}

// CheckReduce reports whether a device Stream reduces elements of dt with
// op: reduceop.Check allows it, and dt is one of the dtypes the device
// kernels cover (package kernels' DTypes: float32, float64, float16,
// bfloat16, int8, uint8, int32, int64). Otherwise it returns an error
// wrapping reduceop.ErrUnsupported. The other dtypes (uint16, uint32,
// uint64, int16, bool, complex64, complex128) move between device buffers
// like any bytes, but a device reduction on them is refused; goccl refuses
// it before a collective sends anything.
func CheckReduce(op reduceop.Op, dt reduceop.DType) error {
	if err := reduceop.Check(op, dt); err != nil {
		return err
	}
	switch dt {
	case reduceop.Float32, reduceop.Float64, reduceop.Float16, reduceop.BFloat16,
		reduceop.Int8, reduceop.Uint8, reduceop.Int32, reduceop.Int64:
		return nil
	}
	return fmt.Errorf("%w: %v on %v: no device kernel for %v", reduceop.ErrUnsupported, op, dt, dt)
}
