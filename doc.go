// Package goccl is a collective-communication library for Go: allreduce,
// broadcast, reduce, allgather, reduce-scatter, all-to-all, gather,
// scatter, send/recv and barriers over groups of ranks, the job NCCL, Gloo
// and torch.distributed do for Python, with the surface of DeepSpeed's
// deepspeed.comm.
//
// A Comm is one rank's handle on a group. Every rank calls the same
// collectives in the same order; buffers are typed Go slices ([]float32,
// []int64, []reduceop.F16, ...) or a DeviceBuffer, and reductions are the
// ops of package reduceop:
//
//	err := goccl.RunLocal(ctx, 4, func(ctx context.Context, c *goccl.Comm) error {
//		grad := []float32{float32(c.Rank()), 1}
//		return c.AllReduce(ctx, grad, reduceop.Sum) // grad == {6, 4} on every rank
//	})
//
// # Buffers
//
// A buffer argument is one of these, and its type is checked before
// anything is sent:
//
//   - []float32, []float64: IEEE 754 single and double precision.
//   - []reduceop.F16, []reduceop.BF16: IEEE half precision and bfloat16,
//     each element its 16-bit pattern; each reduction step computes in
//     float32 and rounds once.
//   - []int8, []uint8, []int32, []int64: integers; []uint8 also carries
//     raw bytes and booleans as 0 and 1.
//   - DeviceBuffer: memory Go cannot address, such as GPU memory
//     (package device/cuda), staged through host memory and reduced by
//     its Kernel.
//
// A buffer is exactly the slice's len elements, contiguous, and a
// collective reads or writes all of them and nothing past len. There are
// no strides: a framework's strided view (a column, a transposed matrix,
// every other element) is not a slice of its own, and the slice it hands
// out, such as Gorgonia's tensor.Dense.Data(), is the backing storage the
// view lies in, holding other elements as well; passed as it is, all of
// them are reduced. Copy the view into a contiguous slice (Gorgonia's
// Materialize makes one), pass that, and copy the result back. A
// tensor that owns its storage, such as a gradient Gorgonia computed,
// can be passed straight: examples/gorgonia hands Data() to
// AllReduceCoalesced.
//
// A 0-d value, a loss or a scalar parameter, is not a buffer: pass a
// one-element slice. []float32{x} copies x (read the result from its
// element); unsafe.Slice(&x, 1) aliases x, so the collective writes x
// itself (ExampleComm_AllReduce_scalar). A Gorgonia scalar's Data() is
// the value itself (a float64, not a slice), which collectives refuse
// with ErrInvalid.
//
// # Algorithms
//
// The algorithms live in algo/ring, algo/tree and algo/halving, written
// over the small algo.Peers interface so that they read like a textbook.
// For each call, algo.Select picks the cheapest by an alpha-beta cost model
// (recursive doubling and trees for small messages, ring and Rabenseifner
// for large ones); WithAlgorithm or GOCCL_ALGO force one, as NCCL_ALGO does.
//
// # Transports
//
// A Comm runs over a transport.Endpoint: transport/mem for ranks as
// goroutines in one process (NewLocal, RunLocal); for processes, Init
// picks per peer (WithTransport, GOCCL_TRANSPORT): transport/shm within a
// host, and between hosts transport/ib (InfiniBand or RoCE verbs, build
// tag ibverbs) when every rank has an active port, else transport/tcp.
// A rank waiting on a peer polls for a few tens of microseconds before it
// sleeps; GOCCL_SPIN sets how long in every transport Init makes ("0":
// not at all), and nothing polls by default when the launcher puts more
// ranks on the host than it has CPUs.
//
// # Errors and timeouts
//
// Every blocking call takes a context; the communicator also has a default
// timeout of 30 minutes (WithTimeout). Failures are *Error values naming the
// operation, this rank and the peer, wrapping ErrTimeout, ErrPeerClosed,
// ErrProtocol, ErrMismatch, ErrAborted or ErrInvalid. Bad arguments are
// refused with ErrInvalid before anything is sent. Any other failure aborts
// the communicator: its endpoint is closed, so no buffer is touched after
// the call returns, and later calls fail at once with ErrAborted. The
// aborting rank tells its peers whom it blames, so every rank names the
// same lost or stalled rank (abort_blame.go). Shrink and Readmit form a new
// communicator after a failure (init_elastic.go).
//
// # Asynchronous calls
//
// The Async forms (DeepSpeed's async_op=True) return a Work at once. The
// order of collectives is fixed when the Async method is called, so ranks
// may overlap several collectives as long as they start them in the same
// order.
package goccl
