// Package quiet keeps a TCP connection's socket out of the Go runtime's
// network poller, so that the bytes arriving on it wake no thread unless
// a goroutine is waiting for them.
//
// Why: the runtime watches every socket of a net.Conn with one epoll set,
// edge-triggered, and while any goroutine of the process waits on the
// poller (a listener's Accept, a client's reader) or a timer is pending,
// an idle P's thread sleeps in epoll_wait on that set. Each segment that
// lands on any watched socket then wakes that thread, though the goroutine
// that reads the socket polls it itself (transport/tcp's waiters spin on
// poll(2)) and the thread finds nothing to do. On a machine whose cores
// are all busy the woken thread takes one from a rank: two processes
// exchanging 32 bytes over loopback with their sockets watched and one
// Accept pending took 13.9-14.6 us an exchange against 6.7-7.4 us with
// the sockets out of the set (GOMAXPROCS 2, 2 cores).
//
// A Conn holds a duplicate of the socket's descriptor, non-blocking, and
// the net.Conn it came from is closed, which takes the socket out of the
// runtime's set. Reads and writes try the descriptor first; one that
// must wait arms the socket in this package's own epoll set, once
// (EPOLLONESHOT), and parks its goroutine on a channel that the set's
// goroutine signals. Between waits the socket is armed for nothing, so a
// rank that polls its sockets is woken by nothing else. The set's
// goroutine runs while any Conn is open and ends with the last Close; it
// waits for the set under the runtime's poller, which watches the set's
// own descriptor (readable while an armed socket is ready), so it holds
// no thread and no P meanwhile: blocked in epoll_wait in a system call it
// kept its P until the runtime's monitor took it back, and with
// GOMAXPROCS 1 nothing else of the process ran meanwhile.
//
// The invariants a reader of the code needs:
//   - Each direction (read, write) has at most one operation in progress,
//     held by its mutex, as the runtime's descriptor lock does for a
//     net.Conn; so at most one goroutine waits on a direction's signal.
//   - A waiter takes a stale signal off its channel before it arms the
//     socket and reads the deadline and the closed flag after it: a signal
//     sent after it armed (the set's, a new deadline's, Close's) is never
//     lost.
//   - The set's goroutine clears a Conn's armed events, under the same
//     lock as the arming, when it reports an event for it, and signals
//     every direction that was armed: a waiter is either signalled or
//     still armed in the kernel.
//   - Close waits for every operation in progress to leave before it
//     closes the descriptor, so that no operation uses a number that a
//     new socket may have taken.
//
// Where epoll is missing (not Linux) Wrap refuses and the caller keeps
// its net.Conn.
package quiet
