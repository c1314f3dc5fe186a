// Package ibfake is an in-memory InfiniBand fabric that implements
// transport/ib's verbs interfaces (ib.Provider and what it opens), so that
// the transport, its protocol and its failure handling run in the
// ordinary `go test`, without cgo or an HCA.
//
// A Fabric holds the devices opened through its Provider; each gets a LID
// of its own, as if each rank were a host. It models what the transport
// relies on: queue pair states (RESET, INIT, RTR, RTS, ERROR) and the
// order of the transitions, receive queues consumed in order, memory
// regions with keys, bounds and access rights (a write outside a region,
// or into one without remote write, fails with a remote access error),
// SEND, RDMA WRITE, RDMA WRITE with immediate (which consumes a receive)
// and RDMA READ, completion queues with an arm-and-wait completion
// channel, and flushes when a queue pair enters the error state.
//
// Work requests are carried out whole when posted, in order, under one
// lock. A SEND or WRITE with immediate that finds no posted receive fails
// with StatusRNRRetryExc at once (real hardware would retry): the
// transport's credits must make that impossible, and the fake makes a
// breach visible.
//
// Faults: QP.FailNext injects an error completion, QP.Break moves a queue
// pair to the error state, Device.Break moves all of a device's queue
// pairs there at once, Device.Crash makes a device vanish (its peers'
// next requests complete with StatusRetryExceeded), and
// Fabric.SetCQDelay makes completions visible only after a delay (a slow
// completion queue).
package ibfake
