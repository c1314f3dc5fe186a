package transport

import (
	"context"
	"errors"
	"fmt"
)

// Tag separates the message streams of concurrent collectives and groups.
// Messages from one sender to one receiver under one tag are delivered in
// the order they were sent (MPI's non-overtaking rule); different tags are
// independent.
type Tag uint64

// Endpoint is one rank's connection to every other rank of a job.
//
// Isend and Irecv never block: they queue the operation and return a
// Request. They may be called from several goroutines at once; the order in
// which calls for the same (peer, tag) return is the order that matches
// messages. Close unblocks every pending request with ErrClosed and frees
// the endpoint's goroutines and sockets; after Close returns, no buffer
// passed to Isend or Irecv is read or written again.
type Endpoint interface {
	// Rank is this endpoint's rank, in [0, Size()).
	Rank() int
	// Size is the number of ranks in the job.
	Size() int
	// Isend sends b to rank to under tag. The caller must not modify b until
	// the request completes. A message to oneself is allowed.
	Isend(to int, tag Tag, b []byte) Request
	// Irecv receives the next message from rank from under tag into b. The
	// message must be exactly len(b) bytes long; any other length completes
	// the request with an error wrapping ErrProtocol, after copying the
	// first min(len(b), length) bytes into b (so a receiver can still read
	// a header it shares with the sender). If the message arrived
	// before Irecv was called it waits in the unexpected-message queue and is
	// copied from there; otherwise it lands straight in b.
	Irecv(from int, tag Tag, b []byte) Request
	// Close aborts every pending request with ErrClosed and releases the
	// endpoint. It is safe to call more than once.
	Close() error
}

// PeerLossNotifier is an optional capability of an Endpoint: it learns
// that a peer is gone as soon as the link to it fails, even while no
// receive from that peer is posted (transport/tcp sees the socket close).
// A communicator uses it to abort at once and name the lost rank.
type PeerLossNotifier interface {
	// OnPeerLoss registers f, called once for each peer whose link fails,
	// from the transport's goroutine, never for the endpoint's own Close.
	// f must not block.
	OnPeerLoss(f func(*PeerError))
}

// Linker is an optional capability of an Endpoint whose links come up on
// demand (transport/tcp with Config.Lazy): it says which peers a link to
// is up, so that news meant for every peer can go over the links that
// exist rather than make one to each. An endpoint without it is linked to
// every peer.
type Linker interface {
	// Linked reports whether a link to peer is up.
	Linked(peer int) bool
}

// LinkNotifier is an optional capability of a Linker: it says when a link
// comes up, so that what its owner keeps per linked peer (goccl's posted
// abort-notice receive) is made then, and not for every peer at the start.
type LinkNotifier interface {
	// OnLink registers f, called once for each link that comes up after
	// OnLink is called (those already up are Linked's to say; one coming
	// up meanwhile may be reported by both), from the transport's
	// goroutine with no lock held. f must not block.
	OnLink(f func(peer int))
}

// StrayReporter is an optional capability of an Endpoint: its owner says
// which tags are finished (no receive will be posted under them again),
// and a message that arrives under a finished tag, or that is still
// queued under a tag when the owner retires it, is dropped and reported
// instead of waiting for ever in the unexpected-message queue. A message
// that nobody will receive means the two ranks disagree about what the
// call under that tag was; goccl turns the report into ErrMismatch.
type StrayReporter interface {
	// OnStray sets the test for finished tags and the report; call it once
	// (messages that arrived before are looked at only by Retire).
	// finished is called while a peer's queue is
	// locked and must be quick and must not block. report is called with
	// no lock held, from a transport goroutine or from Retire, with a copy
	// of the message's first bytes (at most StrayHead); it must not block.
	OnStray(finished func(Tag) bool, report func(from int, tag Tag, head []byte))
	// Retire drops and reports the messages queued under tag.
	Retire(tag Tag)
}

// StrayHead is how many leading bytes of a stray message are reported.
const StrayHead = 32

// Request is a pending Isend or Irecv.
type Request interface {
	// Wait blocks until the request completes or ctx ends. If ctx ends first
	// it returns ctx's error and the request stays pending: the buffer may
	// still be used until the endpoint is closed.
	Wait(ctx context.Context) error
	// Done is closed when the request completes; Err then says how.
	Done() <-chan struct{}
	// Err returns nil while pending or on success, else the failure.
	Err() error
}

// Errors that transports wrap. Use errors.Is to test for them.
var (
	// ErrClosed: the local endpoint was closed.
	ErrClosed = errors.New("transport: endpoint closed")
	// ErrPeerClosed: the peer went away (connection closed or reset).
	ErrPeerClosed = errors.New("peer closed")
	// ErrProtocol: the peer sent something that breaks the protocol
	// (bad frame, wrong message length).
	ErrProtocol = errors.New("protocol error")
	// ErrLength: a message's length differs from its receive buffer's
	// (wrapped together with ErrProtocol). The link itself is fine, and
	// the buffer holds the message's first bytes.
	ErrLength = errors.New("wrong message length")
)

// PeerError reports a failure on the link to one peer.
type PeerError struct {
	Op   string // "send", "recv", "dial", "handshake"...
	Peer int    // the remote rank
	Err  error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("transport: %s peer %d: %v", e.Op, e.Peer, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// CheckPeer returns an error if peer is not a rank of an endpoint of size n.
func CheckPeer(op string, peer, n int) error {
	if peer < 0 || peer >= n {
		return &PeerError{Op: op, Peer: peer, Err: fmt.Errorf("rank out of range [0,%d)", n)}
	}
	return nil
}
