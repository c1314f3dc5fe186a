// Package cuda implements package device on the CUDA driver API through
// gorgonia.org/cu: a Context on one device (a device.Device), device
// Buffers, page-locked Host memory, Streams, Events and Holds, the kernels
// of package kernels loaded once per Context, and launches of them. Its
// Kernel implements reduceop.Kernel and onebit.Kernel on host slices, and
// offers the 1-bit steps on device Buffers enqueued on a Stream; its Buffer
// is a goccl.DeviceBuffer, so the root package's collectives run on GPU
// memory.
//
// # Build tags
//
// The real implementation needs the build tag cuda, the CUDA driver header
// cuda.h and libcuda:
//
//	CGO_CFLAGS="-I$PWD/device/cuda/compat -I/usr/local/cuda/include" go build -tags cuda ./...
//
// (the compat directory is needed with CUDA 13 headers; see README.md).
// Without the tag the package compiles to a stub with the same API whose
// constructors return ErrNotBuilt, so `go build ./...` works on any machine.
// ErrInvalid and ErrClosed, the errors the package wraps, are declared in
// this package and not taken from package goccl, which device code must not
// import.
//
// # Warning: importing gorgonia.org/cu can exit the process
//
// With the cuda tag this package imports gorgonia.org/cu, whose init function
// calls cuInit and, if that fails (no driver, no GPU visible, driver too old),
// prints a message and calls os.Exit(1) before main runs. A binary built with
// the tag therefore cannot fall back to the CPU at run time: build CPU-only
// binaries without the tag.
//
// # The primary context, and memory goccl does not own
//
// Open works in the device's primary context, the one the CUDA runtime (and
// so PyTorch, CuPy, JAX) uses: it retains it at Open and releases it at
// Close, and leaves its flags as the first user set them. goccl's module,
// scratch memory and streams then live beside the framework's, so
//
//   - Wrap turns a framework's device pointer (a tensor's data_ptr()) into a
//     Buffer without a copy; goccl never frees it. Wrap asks the driver
//     first whether the whole range is device memory of this device, in one
//     allocation, usable from this context, and returns an error wrapping
//     ErrInvalid, naming the pointer and range, instead of letting a kernel
//     fault later;
//   - WrapStream turns a framework's CUstream into a Stream, so goccl's
//     copies and kernels queue behind the framework's kernels without the
//     host waiting; goccl never destroys it.
//
// OpenPrivate creates a context of goccl's own instead (cuCtxCreate),
// destroyed by Close. Use it when goccl is the only CUDA user in the
// process and you want Close to take down everything at once, or to keep a
// fault in goccl's kernels (which poisons the context it happens in) away
// from the framework's context. Memory and streams of other contexts cannot
// be used with a private Context: Wrap refuses them.
//
// # Threads
//
// The driver keeps a current context per OS thread. Every driver call of
// this package runs on the calling goroutine, locked to its thread for the
// duration of the call, with the Context's context made current and the
// thread's previous context put back afterwards: there is no goroutine per
// Context, calls on one Context run concurrently, and a thread the
// framework uses is left as it was found. (gorgonia's cu.Ctx is not used:
// it funnels every call through one goroutine, and its Close and finalizer
// destroy the context, which must never happen to the primary one.) Each call also
// holds the Context open (a read lock that Close takes for writing), so
// Close waits for calls in flight and later calls return ErrClosed.
//
// # Streams, events and holds
//
// A Stream's methods only enqueue. Its asynchronous copies accept host
// memory only inside a live AllocHost allocation (page-locked, so the copy
// engine reads it while the host goes on), and refuse other memory with an
// error wrapping ErrInvalid. Event.Wait and Stream.Synchronize poll the
// driver (cuEventQuery, cuStreamQuery) with a short backoff, from 2µs to
// 1ms, so that their ctx is honoured; nothing in the package waits on the
// whole context, except Close.
//
// Stream.Hold enqueues cuStreamWaitValue32_v2 on a word of page-locked host
// memory mapped into the device, which Release writes from Go. These
// stream memory operations need a driver of CUDA 11.7 or later (where the
// v2 entry points are on by default; CUDA 12 and later always have them).
// Whether the driver has them is decided once at Open; without them Hold
// returns an error wrapping errors.ErrUnsupported. A held stream stalls the
// hardware queue it runs on, and the driver spreads streams over a few
// such queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), so another
// stream may wait behind a Hold too: release holds promptly, and never wait
// on the host for a stream while holding a Hold another stream's progress
// depends on.
//
// # Grids
//
// Kernels loop over their work (grid-stride loops), so a launch needs only
// enough blocks to fill the device once. Open asks the driver how many
// blocks of each kernel fit on one multiprocessor
// (cuOccupancyMaxActiveBlocksPerMultiprocessor) and a launch uses at most
// that many times the multiprocessor count.
//
// # The 1-bit steps on the device
//
// Kernel.CompensateNormOn leaves the scale in a float32 device Buffer and
// PackUpdateOn, AccumulateSignsOn and DecompressOn read it from there, so a
// compression step is a chain of kernels on one stream with no copy to the
// host and no synchronization. The host-slice methods of onebit.Kernel stage
// their slices through device memory on a stream of the Kernel's own and
// wait for an event recorded after the last copy.
package cuda
