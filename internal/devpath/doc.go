// Package devpath implements goccl's device data path: a collective on a
// device buffer runs the same algorithm (algo/...) as on a host slice,
// segment by segment, with the reductions on the device.
//
// The algorithm is handed a stand-in for the device buffer: a range of
// reserved address space (reserve) of the buffer's length, which it slices
// as it would slice host memory but never reads, because every byte it
// moves goes through its Peers. Peers maps an address in a stand-in back
// to (device buffer, byte offset) and does the real work:
//
//	Isend(to, b)   each chunk of b: device -> pinned slot on the send stream,
//	               then, once its event completes, the slot goes on the wire
//	Irecv(from, b) each chunk of b: wire -> pinned slot, then pinned slot ->
//	               device on the recv stream; the request completes when the
//	               copy has
//	Reduce(d, s)   our kernel on the compute stream: d op= s, both on device
//	Copy(d, s)     device-to-device copy on the compute stream
//	GetScratch(n)  device scratch memory, behind a stand-in of its own
//
// A message is cut into chunks of at most Chunk bytes, each its own
// transport message; the receiver, being a Peers too, cuts the same way
// (goccl's fingerprint carries the chunking, so a rank with a host buffer
// and one with a device buffer in one call fail with ErrMismatch instead
// of misreading each other). Each peer and direction has a lane: chunks go
// through it in order, at most laneSlots at a time, each in a pinned slot
// from the communicator's pool (Ctx), so the pinned memory in use is
// bounded and allocated once per communicator, not per call. While chunk k
// is on the wire, chunk k+1 is being copied off the device and the
// algorithm reduces chunk k-1: the overlap comes from the lanes running
// beside the algorithm's own goroutine.
//
// Reduce and Copy wait for their kernel before they return, so the
// algorithm's rule that a buffer is not touched while a request on it is
// pending is all the ordering the device work needs.
//
// Between the ranks of one host a large message goes device to device
// through the device's IPC handles instead of in staged chunks (ipc.go).
//
// # Where the package is cut
//
// The package knows nothing of a communicator. What it needs of one, for
// one call, is a Link: the call's ranks, its data messages (the first of
// which carries the fingerprint, the communicator's business), a second
// channel for the IPC acks, whether a peer is on this host, a peer's rank
// in the job (the pools are shared by a communicator's groups) and a log.
// goccl implements Link over its peers (devpath.go in the root) and keeps
// one Devices per communicator; Ctx.Run is the entry point of a
// collective on device memory.
package devpath
