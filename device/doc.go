// Package device says what goccl needs from an accelerator, so that the
// root package's collectives run on memory Go code cannot address with the
// same algorithms as on host slices.
//
// A Device hands out three things:
//
//   - Buffers: device memory, either its own (Alloc) or memory a framework
//     owns and wraps (for CUDA, cuda.Wrap);
//   - page-locked host memory (AllocHost), the only host memory the
//     asynchronous copies below accept;
//   - Streams: queues on which copies and kernel launches run in order and
//     asynchronously, and Events that mark a point on a stream.
//
// Work on one stream runs in the order it was enqueued; work on two streams
// is unordered unless an Event joins them (Stream.Record, then
// Stream.WaitEvent on the other stream). Enqueueing never waits for the
// device; Event.Wait and Stream.Synchronize do. A Hold lets host code keep
// a stream waiting until it says so, which is how a collective that the
// host drives is placed between two kernels of a caller's stream.
//
// A Device may also implement IPC: handles that let another process on the
// host map a Buffer's memory (CUDA IPC), which goccl uses to copy device to
// device between the ranks of one host.
//
// Two implementations exist: package device/cuda (build tag cuda) on the
// CUDA driver API, and package device/hostsim, a pure-Go device on host
// memory whose streams are goroutines and whose copies and launches can be
// given latencies, so that CI can test ordering and overlap without a GPU.
// Package device/devicetest checks both against the contract written here.
package device
