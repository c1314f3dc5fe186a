package algo

import "sort"

// Vec is a buffer made of pieces that an algorithm treats as one run of
// bytes: the caller's slices of a coalesced call (torch's
// all_reduce_coalesced), in order, reduced where they lie instead of
// packed into one buffer and unpacked after. Offsets count from the start
// of the run; a range [lo, hi) may span pieces.
//
// The algorithms that take a Vec send a range as one message where the
// Peers have vectored messages to the rank at the other end (VecPeers),
// else as one message for each piece it spans, and receive it the same
// way, so both ends cut a message alike when their pieces have the same
// lengths; where they do not, a receive meets a message of another
// length, which the transport reports, and never misplaced bytes. A Vec
// of one piece (Flat) is a plain buffer, and those algorithms then send
// exactly what they send for one; so does a range within one piece.
//
// The zero Vec is an empty buffer.
type Vec struct {
	one   []byte   // the whole run, when it is one piece (parts is nil)
	parts [][]byte // else: the pieces, none empty
	ends  []int    // ends[i] is the offset just past parts[i]
}

// Flat returns the Vec of the one buffer b.
func Flat(b []byte) Vec { return Vec{one: b} }

// Pieces returns the Vec of parts, in order. Empty parts hold no bytes
// and are left out; a list with at most one non-empty part is Flat.
func Pieces(parts [][]byte) Vec {
	var v Vec
	total := 0
	for _, b := range parts {
		if len(b) == 0 {
			continue
		}
		total += len(b)
		v.parts = append(v.parts, b)
		v.ends = append(v.ends, total)
	}
	switch len(v.parts) {
	case 0:
		return Vec{}
	case 1:
		return Flat(v.parts[0])
	}
	return v
}

// Len returns the number of bytes in v.
func (v Vec) Len() int {
	if v.parts == nil {
		return len(v.one)
	}
	return v.ends[len(v.ends)-1]
}

// Piece returns the bytes of v from offset off on, up to offset hi or the
// end of the piece that holds off, whichever comes first. A loop over a
// range takes one piece at a time:
//
//	for off := lo; off < hi; {
//		b := v.Piece(off, hi)
//		...
//		off += len(b)
//	}
func (v Vec) Piece(off, hi int) []byte {
	if v.parts == nil {
		return v.one[off:hi]
	}
	i := sort.SearchInts(v.ends, off+1) // the first piece that ends past off
	start := v.ends[i] - len(v.parts[i])
	return v.parts[i][off-start : min(hi, v.ends[i])-start]
}

// VecPeers is an optional capability of Peers: vectored messages, whose
// bytes are several buffers one after the other (transport.VecEndpoint),
// sent and received without packing them into one.
type VecPeers interface {
	Peers
	// Vectored says whether messages to and from rank peer go vectored.
	// Both ends of a link must answer alike: the algorithms send a range
	// of a Vec as one message where it is true, and receive it as one.
	Vectored(peer int) bool
	// IsendV starts sending bufs, in order, as one message to rank to.
	IsendV(to int, bufs [][]byte) Request
	// IrecvV starts receiving the next message from rank from into bufs,
	// in order; it must be exactly as long as all of them.
	IrecvV(from int, bufs [][]byte) Request
}

// vectored returns p as VecPeers where a range [lo, hi) of v that spans
// more than one piece goes to or from peer as one message.
func vectored(p Peers, peer int, v Vec, lo, hi int) (VecPeers, bool) {
	if v.parts == nil || hi-lo <= 0 || len(v.Piece(lo, hi)) == hi-lo {
		return nil, false
	}
	vp, ok := p.(VecPeers)
	if !ok || !vp.Vectored(peer) {
		return nil, false
	}
	return vp, true
}

// pieces returns the pieces of bytes [lo, hi) of v.
func (v Vec) pieces(lo, hi int) [][]byte {
	var bufs [][]byte
	for off := lo; off < hi; {
		b := v.Piece(off, hi)
		bufs = append(bufs, b)
		off += len(b)
	}
	return bufs
}

// SendRange starts sending bytes [lo, hi) of v to rank to, as one
// vectored message (VecPeers) or one message a piece, and appends the
// requests to reqs.
func SendRange(p Peers, to int, v Vec, lo, hi int, reqs []Request) []Request {
	if vp, ok := vectored(p, to, v, lo, hi); ok {
		return append(reqs, vp.IsendV(to, v.pieces(lo, hi)))
	}
	for off := lo; off < hi; {
		b := v.Piece(off, hi)
		reqs = append(reqs, p.Isend(to, b))
		off += len(b)
	}
	return reqs
}

// RecvRange starts receiving bytes [lo, hi) of v from rank from, straight
// into their places in v, as one vectored message (VecPeers) or one
// message a piece, and appends the requests to reqs.
func RecvRange(p Peers, from int, v Vec, lo, hi int, reqs []Request) []Request {
	if vp, ok := vectored(p, from, v, lo, hi); ok {
		return append(reqs, vp.IrecvV(from, v.pieces(lo, hi)))
	}
	for off := lo; off < hi; {
		b := v.Piece(off, hi)
		reqs = append(reqs, p.Irecv(from, b))
		off += len(b)
	}
	return reqs
}

// RecvRangeInto starts receiving what SendRange sends for bytes [lo, hi)
// of a Vec cut as v is, into into (hi-lo bytes, contiguous): one message,
// or one message a piece of v where SendRange sends so, and appends the
// requests to reqs.
func RecvRangeInto(p Peers, from int, v Vec, lo, hi int, into []byte, reqs []Request) []Request {
	if _, ok := vectored(p, from, v, lo, hi); ok {
		return append(reqs, p.Irecv(from, into[:hi-lo]))
	}
	for off := lo; off < hi; {
		n := len(v.Piece(off, hi))
		reqs = append(reqs, p.Irecv(from, into[off-lo:off-lo+n]))
		off += n
	}
	return reqs
}

// ReduceRange reduces src (hi-lo bytes) into bytes [lo, hi) of v, piece by
// piece, through p.
func ReduceRange(p Peers, v Vec, lo, hi int, src []byte) error {
	for off := lo; off < hi; {
		b := v.Piece(off, hi)
		if err := p.Reduce(b, src[off-lo:off-lo+len(b)]); err != nil {
			return err
		}
		off += len(b)
	}
	return nil
}
