// Package tcp implements transport.Endpoint over TCP, for ranks that are
// separate processes, on one machine or many.
//
// Connect joins a job. Each rank listens, publishes its address in a
// rendezvous KV store under AddrKey(rank), and connects once per pair of
// ranks: the lower rank dials the higher one, retrying with backoff until
// Config.InitTimeout. Every connection starts with a handshake carrying a
// magic number, protocol version, job id, rank, job size and stream index;
// with Config.Secret set both ends also prove knowledge of the secret with
// HMAC-SHA256 over a fresh random nonce from the other end. A stranger, a
// wrong secret or job id, or a duplicate or out-of-range rank is refused
// and logged, and Connect goes on waiting for the legitimate peer. With
// Config.Lazy, Connect links only the ring neighbours and every other
// pair when its first message is sent, from either side (lazy.go says how,
// and how a tie between two dials is broken).
//
// On the wire a message is a 16-byte little-endian header (tag, length)
// followed by the payload, written with one vectored write; queued small
// messages are batched into one write. One goroutine at a time reads a
// peer's socket, holding that peer's read token (reader.go): a goroutine
// waiting on a receive from the peer reads the socket itself when no one
// else does, polling it for up to Config.Spin (DefaultSpin, 100 µs;
// negative: never) before it sleeps in the network poller (this halves
// small-message latency: no hand-off between goroutines, no thread
// wake-up). After a first read it polls with poll(2), which does not take
// the socket lock that the peer's write needs to deliver the bytes (a
// read does), as raw system calls on Linux; it arms its ctx only before a
// read that may block, and allocates nothing. A background reader drains
// the socket otherwise. Either reads a payload straight into the posted
// receive's buffer, or into the unexpected-message queue of
// transport.Matcher when none is posted. A small send to an idle link is
// written on the caller's goroutine; others go to the peer's sender
// goroutine, which runs while sends are queued. With GOMAXPROCS 1 (a rank
// bound to one core) a large send is written on the caller's goroutine
// too, as much as the socket takes at once: the sender goroutine could
// not run before the caller parks. A send completes when its bytes are
// written to the socket.
// With Config.Streams > 1, messages of DefaultStripeMin bytes or more are
// split over several connections per pair.
//
// Failures: a failed write stops sends to the peer at once, but the
// link's end is left to the reader, which first delivers what the peer
// sent before (a last message saying why it left, say). The death of a
// peer (EOF, reset) fails pending and later receives from it with a *transport.PeerError wrapping
// transport.ErrPeerClosed; a malformed frame (a length over
// Config.MaxMessage) is a PeerError wrapping transport.ErrProtocol and the
// link is dropped. Connect's ctx interrupts dials and handshakes (a past
// socket deadline via context.AfterFunc). Close aborts pending requests
// with transport.ErrClosed, closes the sockets and waits for the
// endpoint's goroutines; after it returns no buffer is touched again.
//
// Measured on a shared 2-core AMD EPYC VM over loopback
// (go test -bench . -benchtime 2s ./transport/tcp): 64 MiB messages at
// 1.8-2.9 GB/s with one stream (up to 3.5 GB/s with 2-4), and a 1-byte
// round trip of 19-22 µs; runs vary with the machine's load. Between 2
// processes bound to a core each (scripts/vs-mpi.sh 7, 2026-11-25, load
// 0.6): an 8-byte allreduce in 6.86 µs (Open MPI's TCP BTL 6.69), 1 MiB
// at 5.6 GB/s busbw (Open MPI 4.8).
package tcp
