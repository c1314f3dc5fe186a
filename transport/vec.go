package transport

// VecEndpoint is an Endpoint that sends and receives vectored messages:
// a message whose bytes are several buffers one after the other, sent
// and received without packing them into one. It is optional; goccl's
// coalesced collectives, which run on the caller's slices as they lie,
// send a range that spans several slices as one vectored message where
// Vectored says the link carries them, and as one message per slice
// elsewhere.
//
// A vectored message is an ordinary message on the wire: IsendV's may be
// received by Irecv of the total length, and an ordinary Isend's by
// IrecvV of pieces of the same total length. Empty pieces hold no bytes.
type VecEndpoint interface {
	Endpoint
	// IsendV sends bufs, in order, as one message to rank to under tag.
	// The caller must not modify any of them (nor bufs itself) until the
	// request completes.
	IsendV(to int, tag Tag, bufs [][]byte) Request
	// IrecvV receives the next message from rank from under tag into
	// bufs, in order: the message must be exactly as long as all of them
	// together, and the rules of Irecv on another length hold with bufs
	// taken as one buffer.
	IrecvV(from int, tag Tag, bufs [][]byte) Request
	// Vectored says whether messages to and from peer go vectored
	// without a copy of their bytes beyond what one plain message
	// costs. Both ends of a link answer alike, so that a sender that
	// sends a range as one message meets a receiver that receives it as
	// one. Where it is false, IsendV and IrecvV still work, by a copy.
	Vectored(peer int) bool
}

// VecLen returns the total length of bufs.
func VecLen(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// Gather copies the concatenation of bufs into dst, as far as dst goes,
// and returns the bytes copied.
func Gather(dst []byte, bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		if n == len(dst) {
			break
		}
		n += copy(dst[n:], b)
	}
	return n
}

// Scatter copies src into bufs in turn, as far as they go, and returns
// the bytes copied.
func Scatter(bufs [][]byte, src []byte) int {
	n := 0
	for _, b := range bufs {
		if n == len(src) {
			break
		}
		n += copy(b, src[n:])
	}
	return n
}

// PackedSendV sends bufs as one message over ep, which has no vectored
// sends: packed into one new buffer (a copy) unless there is at most one
// non-empty piece.
func PackedSendV(ep Endpoint, to int, tag Tag, bufs [][]byte) Request {
	if b, ok := single(bufs); ok {
		return ep.Isend(to, tag, b)
	}
	m := make([]byte, VecLen(bufs))
	Gather(m, bufs)
	return ep.Isend(to, tag, m)
}

// PackedRecvV receives one message over ep, which has no vectored
// receives, into bufs: into one new buffer (a copy) that is scattered
// into bufs when it arrives, unless there is at most one non-empty piece.
func PackedRecvV(ep Endpoint, from int, tag Tag, bufs [][]byte) Request {
	if b, ok := single(bufs); ok {
		return ep.Irecv(from, tag, b)
	}
	m := make([]byte, VecLen(bufs))
	in := ep.Irecv(from, tag, m)
	out := NewRequest()
	go func() {
		<-in.Done()
		Scatter(bufs, m) // on a length error, the common prefix, as Irecv leaves it
		out.Complete(in.Err())
	}()
	return out
}

// single returns the one non-empty buffer of bufs (or an empty one when
// there is none), and false when there are more.
func single(bufs [][]byte) ([]byte, bool) {
	var one []byte
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if one != nil {
			return nil, false
		}
		one = b
	}
	if one == nil {
		one = []byte{}
	}
	return one, true
}
