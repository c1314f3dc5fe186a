// Package cuda implements goccl's GPU side on the CUDA driver API through
// gorgonia.org/cu: a context on one device, device buffers, pinned host
// staging buffers, streams and events, the kernels of package kernels loaded
// once per context, and typed launches of them. Its Kernel implements
// reduceop.Kernel (and the methods of onebit.Kernel), and its Buffer is a
// goccl.DeviceBuffer, so the root package's collectives run on GPU memory.
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
//
// # Warning: importing gorgonia.org/cu can exit the process
//
// With the cuda tag this package imports gorgonia.org/cu, whose init function
// calls cuInit and, if that fails (no driver, no GPU visible, driver too old),
// prints a message and calls os.Exit(1) before main runs. A binary built with
// the tag therefore cannot fall back to the CPU at run time: build CPU-only
// binaries without the tag.
//
// # Threads
//
// The CUDA driver binds a context to an OS thread. A Context runs every driver
// call on one goroutine locked to its thread (gorgonia's cu.Ctx), so its
// methods may be called from any goroutine; calls on one Context are
// serialized. A context.Context passed to a copy is checked before the copy
// starts; a copy or kernel already submitted runs to completion.
package cuda
