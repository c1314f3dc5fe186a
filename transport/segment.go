package transport

// SegmentHinter is an optional capability of an Endpoint whose large
// messages to some peers are best sent in pieces of another size than the
// pipelined algorithms' default (algo.DefaultSegmentBytes, 256 KiB).
// transport/shm's receiver pulls each large message with one system call
// that pins the sender's pages, so it wants pieces of megabytes; TCP
// streams, and its pieces overlap the reduction of one with the transfer
// of the next. transport/route forwards the question to the endpoint of
// the peer's route.
//
// Every rank of a communicator must cut its messages alike: goccl asks
// for every peer of a communicator once, takes the hint only where all of
// them give one, and carries its choice in each call's fingerprint, so
// that ranks that chose differently fail with ErrMismatch.
type SegmentHinter interface {
	// SegmentBytes is the size of the pieces to cut a large message to
	// peer into, or 0 for the algorithms' default.
	SegmentBytes(peer int) int
}
