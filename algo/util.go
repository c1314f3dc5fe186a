package algo

import (
	"context"
	"fmt"
)

// WaitAll waits for every non-nil request in order and returns the first
// error. It returns at the first failure without waiting for the rest: the
// caller is expected to abort the communicator, which ends them.
func WaitAll(ctx context.Context, reqs ...Request) error {
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if err := r.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Send sends b to rank to and waits for the send to complete.
func Send(ctx context.Context, p Peers, to int, b []byte) error {
	if err := p.Isend(to, b).Wait(ctx); err != nil {
		return fmt.Errorf("send to rank %d: %w", to, err)
	}
	return nil
}

// Recv receives the next message from rank from into b and waits for it.
func Recv(ctx context.Context, p Peers, from int, b []byte) error {
	if err := p.Irecv(from, b).Wait(ctx); err != nil {
		return fmt.Errorf("recv from rank %d: %w", from, err)
	}
	return nil
}

// Exchange is a full-duplex step: it posts the receive of recv from rank
// from, then the send of send to rank to, then waits for both. A side whose
// buffer is empty is skipped, so both peers must compute the same lengths.
func Exchange(ctx context.Context, p Peers, to int, send []byte, from int, recv []byte) error {
	var rr, sr Request
	if len(recv) > 0 {
		rr = p.Irecv(from, recv)
	}
	if len(send) > 0 {
		sr = p.Isend(to, send)
	}
	if rr != nil {
		if err := rr.Wait(ctx); err != nil {
			return fmt.Errorf("recv from rank %d: %w", from, err)
		}
	}
	if sr != nil {
		if err := sr.Wait(ctx); err != nil {
			return fmt.Errorf("send to rank %d: %w", to, err)
		}
	}
	return nil
}

// EvenCounts splits count elements into n blocks whose sizes differ by at
// most one, the larger blocks first: EvenCounts(10, 4) = [3 3 2 2].
func EvenCounts(count, n int) []int {
	c := make([]int, n)
	if n == 0 {
		return c
	}
	q, r := count/n, count%n
	for i := range c {
		c[i] = q
		if i < r {
			c[i]++
		}
	}
	return c
}

// Offsets returns the byte offsets of the blocks described by counts
// (elements of elemSize bytes): block i is buf[off[i]:off[i+1]], and
// off[len(counts)] is the total length.
func Offsets(counts []int, elemSize int) []int {
	off := make([]int, len(counts)+1)
	for i, c := range counts {
		off[i+1] = off[i] + c*elemSize
	}
	return off
}

// CheckBlocks reports an error unless counts has one entry per rank, none
// negative, and buf holds exactly their sum of elements.
func CheckBlocks(p Peers, buf []byte, counts []int) error { return CheckBlocksLen(p, len(buf), counts) }

// CheckBlocksLen is CheckBlocks for a buffer of n bytes.
func CheckBlocksLen(p Peers, n int, counts []int) error {
	if len(counts) != p.Size() {
		return fmt.Errorf("%d counts for %d ranks", len(counts), p.Size())
	}
	total := 0
	for i, c := range counts {
		if c < 0 {
			return fmt.Errorf("negative count %d for rank %d", c, i)
		}
		total += c
	}
	if total*p.ElemSize() != n {
		return fmt.Errorf("buffer of %d bytes for %d elements of %d bytes", n, total, p.ElemSize())
	}
	return nil
}

// CheckRoot reports an error unless root is a rank of the group.
func CheckRoot(p Peers, root int) error {
	if root < 0 || root >= p.Size() {
		return fmt.Errorf("root %d out of range [0,%d)", root, p.Size())
	}
	return nil
}

// Log2 returns floor(log2(n)) for n >= 1, and 0 for n < 1.
func Log2(n int) int {
	k := 0
	for n > 1 {
		n >>= 1
		k++
	}
	return k
}

// CeilLog2 returns the smallest k with 1<<k >= n (0 for n <= 1).
func CeilLog2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// DefaultSegmentBytes is the default size of the segments that pipelined
// algorithms (ring reduce-scatter and broadcast, tree allreduce) cut a block
// into, so that the reduction or forwarding of segment k overlaps the
// transfer of segment k+1. The cost model assumes it too.
const DefaultSegmentBytes = 256 << 10

// Segmenter is an optional capability of Peers whose transport wants
// another segment size than DefaultSegmentBytes (transport/shm, whose
// receivers pull each message with one system call, wants megabytes).
// Every rank of the group must answer alike.
type Segmenter interface {
	// SegmentBytes is the segment size to use, or 0 for the default.
	SegmentBytes() int
}

// SegmentFor is the segment size a pipelined algorithm uses on p: opt,
// the algorithm's option, where it is set; else p's own (Segmenter);
// else 0, which SegmentLen reads as DefaultSegmentBytes.
func SegmentFor(p Peers, opt int) int {
	if opt > 0 {
		return opt
	}
	if s, ok := p.(Segmenter); ok {
		return max(s.SegmentBytes(), 0)
	}
	return 0
}

// Segments returns the number of segments of at most seg bytes (rounded
// down to whole elements, at least one element) that n bytes are cut into.
func Segments(n, seg, elemSize int) int {
	s := SegmentLen(seg, elemSize)
	return (n + s - 1) / s
}

// SegmentLen rounds seg down to a multiple of elemSize, at least one
// element; a non-positive seg means DefaultSegmentBytes.
func SegmentLen(seg, elemSize int) int {
	if seg <= 0 {
		seg = DefaultSegmentBytes
	}
	if elemSize < 1 {
		elemSize = 1
	}
	s := seg / elemSize * elemSize
	if s < elemSize {
		s = elemSize
	}
	return s
}
