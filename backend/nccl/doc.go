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
//   - Send and Recv stay on goccl's own path. NCCL pairs the sends and
//     receives between two ranks in the order they are issued, whatever
//     the tag, and runs each after the communicator's earlier calls on
//     its stream; goccl posts a Send or Recv when it is made and matches
//     it by tag. On NCCL a receive taken out of order by tag would get
//     another tag's message, and two ranks that each send before they
//     receive, or that interleave a send with a collective differently,
//     could wait on each other for ever (ungrouped ncclSend blocks until
//     its receive runs).
//
// Which library runs a call: Comm.BackendOn asks the backend's Takes
// with a probe of the call's buffer, dtype and op; goccl bench shows it
// in its algo column, and the comms log and the flight recorder record
// algo "nccl" for every call NCCL ran. GOCCL_DEBUG=info says once, at
// Init, that NCCL opened (its version and path), or, under auto, which
// ranks could not load it. Ranks of one process (NewLocal) share its one
// load of the library, so auto asks no other rank there.
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
