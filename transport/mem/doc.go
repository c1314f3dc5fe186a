// Package mem implements transport.Endpoint for ranks that are goroutines
// of one process, for tests, examples and threads-as-ranks jobs.
//
// New(size) returns one endpoint per rank; endpoint i is rank i. A message
// that finds its receive already posted is copied straight into the
// receiver's buffer and both requests complete. Otherwise a message of at
// most Config.EagerLimit bytes (64 KiB by default) is copied into the
// receiver's unexpected-message queue and its send completes at once, while
// a larger one is sent by rendezvous: the receiver keeps a reference to the
// sender's buffer and the send completes only when a receive has copied it.
//
// Rendezvous has a consequence for code on top: a rank must post its
// receive before it waits on a send, or two ranks that both send a large
// message to each other and then receive will wait for ever. Algorithms do
// this naturally by starting Isend and Irecv and only then waiting on both
// (full duplex). EagerLimit < 0 makes every message rendezvous, the
// strictest setting, which tests use to catch such ordering bugs.
//
// Config.Faults is a deterministic fault plan in the manner of raft's
// rafttest network: drop, delay or corrupt a message, break a link, or
// kill a rank, each at a chosen message number, so failure tests run in
// milliseconds and reproduce exactly. Closing an endpoint (or killing it)
// fails its pending requests with transport.ErrClosed and every peer's
// receives from it with a *transport.PeerError wrapping
// transport.ErrPeerClosed.
//
// A goroutine waiting on a receive polls for it for Config.Spin
// (DefaultSpin, 20 us; negative: not at all), yielding the processor
// between polls so that the sender can run on it, before it parks on a
// channel: most waits between goroutine ranks are shorter than a wake-up.
// The spin stops by itself for a while when it does not pay
// (transport.Spinner). Released receives are reused (transport.Release), so
// small messages allocate nothing.
//
// mem starts no goroutines, except a timer for a Delay fault.
package mem
