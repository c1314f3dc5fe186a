// Package nccl is goccl's NCCL backend: with GOCCL_BACKEND=nccl (or
// auto, the default, where the library loads on every rank) a
// communicator's collectives on device memory run as NCCL's, enqueued on
// a CUDA stream, while goccl keeps its own front: argument checks, the
// call's order, fingerprints compared over goccl's links, the deadline,
// the flight recorder and the comms logger (package backend).
//
// It is compiled only with the build tag cuda. NCCL is not linked: the
// library is opened at run time with dlopen (GOCCL_NCCL_LIB, else
// libnccl.so.2) and its entry points found with dlsym, against a header
// of goccl's own (goccl_nccl.h) that declares the few types and enums it
// uses, so that no nccl.h is needed to build. Without the library,
// GOCCL_BACKEND=nccl is refused at Init (backend.ErrUnavailable) and auto
// runs goccl's own path, logged once at info.
//
// The communicator of a group is made at its first call on device memory
// (NCCL runs on one device, known then): the group's rank 0 makes the
// unique id and sends it to the other members over goccl's links, then
// every member calls ncclCommInitRank. A group split from a communicator
// that is up is made with ncclCommSplit where the library has it (2.18
// and later); else it makes its own id at its own first device call.
// Coming up is not bounded by the call's deadline: ncclCommInitRank
// (and ncclCommSplit) wait for every member, so a member that never makes
// that first device call holds the others there.
//
// What it maps, and what it does not:
//   - Device memory of device/cuda only: host memory runs on goccl's own
//     path (auto never gives NCCL a host buffer).
//   - AllReduce, Broadcast, Reduce, AllGather and ReduceScatter one to
//     one; AllToAll (with counts too), Gather and Scatter as grouped
//     ncclSend/ncclRecv. Data that is only moved goes as bytes, so every
//     dtype moves.
//   - Reductions: float32, float64, float16, bfloat16, int8, uint8,
//     int32, uint32, int64, uint64; Sum, Prod, Min, Max; Avg as ncclAvg
//     on floats where NCCL has it (2.10 and later), else, and on
//     integers, as Sum and a division on the same stream (reduceop's
//     rounding). BAnd, BOr, BXor and the dtypes NCCL has no name for
//     (uint16, int16, bool, complex64, complex128) run on goccl's own
//     path, as do AllGather and ReduceScatter of unequal blocks.
//   - Send and Recv stay on goccl's own path: NCCL has no tags, and
//     goccl's point-to-point calls match by tag when they are posted.
//
// Streams: a call runs on the communicator's own stream, or, made on a
// framework's stream (goccl's StreamComm), on that one: it is enqueued
// there in its order before the StreamComm call returns, and nothing on
// the host waits for the stream.
//
// The deadline: a call's Request tests the event recorded after it on
// the stream and ncclCommGetAsyncError; at the deadline the wait ends,
// the rank behind is named by goccl's guard (package backend) and the
// communicator is aborted (ncclCommAbort): NCCL cannot take back one
// call, so every later call of that communicator fails (ErrAborted).
package nccl
