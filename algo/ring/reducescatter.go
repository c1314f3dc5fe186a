// Ring reduce-scatter.
//
// The buffer holds n blocks; rank r must end with block r reduced over all
// ranks. In step s (s = 1..n-1) rank r sends block r-s to rank r+1 and
// receives block r-s-1 from rank r-1 (mod n), which it reduces into its own copy;
// the block it sends in step s+1 is the one it has just reduced. So block b
// starts at rank b+1 and travels once around the ring, picking up every
// rank's contribution, until it stops, complete, at rank b. Four ranks,
// blocks A B C D (rank i owns block i; "C12" is block C reduced over ranks 1
// and 2, "C*" over all):
//
//	         rank 0          rank 1          rank 2          rank 3
//	step 1:  D    -> 1       A    -> 2       B    -> 3       C    -> 0
//	step 2:  C30  -> 1       D01  -> 2       A12  -> 3       B23  -> 0
//	step 3:  B230 -> 1       C301 -> 2       D012 -> 3       A123 -> 0
//	after:   A* at 0         B* at 1         C* at 2         D* at 3
//
// Each step's block is cut into segments of at most Options.SegmentBytes:
// all segment sends are started at once, and the receive of segment k+1 is
// posted before segment k is reduced, so reduction overlaps transfer.
//
// Cost, with N the bytes of the whole buffer, blocks of N/n bytes and s
// the bytes of a block's last segment (N/n when a block is one segment):
//
//	T = (n-1)·α + (n-1)/n·N·β + (n-1)·s·γ        (γ ≤ β)
//
// Segment k is reduced while segment k+1 arrives, so of each step's
// reductions only the last segment's shows; the textbook (n-1)/n·N·γ
// charges them all. Exact in the simulator (sim's costmodel_test.go);
// algo.Cost has the γ > β case too.
//
// Counted exactly, with seg the segment size: rank r sends every block b
// except its own (b ≠ r) once, as ⌈B_b/seg⌉ messages (none when the block
// is empty), and receives every block except block r-1 the same way. The
// γ term is the reduction of every received byte.

package ring

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

// ReduceScatter reduces buf (block i holding counts[i] elements) across the
// ring with the zero Options.
func ReduceScatter(ctx context.Context, p algo.Peers, buf []byte, counts []int) error {
	return Options{}.ReduceScatter(ctx, p, buf, counts)
}

// ReduceScatter reduces buf (block i holding counts[i] elements) across the
// ring and leaves block Rank() reduced in place; the other blocks are
// scratch afterwards. It has the shape of algo.ReduceScatterFunc.
func (o Options) ReduceScatter(ctx context.Context, p algo.Peers, buf []byte, counts []int) error {
	if err := algo.CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("ring reduce-scatter: %w", err)
	}
	if err := o.reduceScatter(ctx, p, algo.Flat(buf), algo.Offsets(counts, p.ElemSize())); err != nil {
		return fmt.Errorf("ring reduce-scatter: %w", err)
	}
	return nil
}

// reduceScatter runs the n-1 reducing steps over the blocks at byte offsets
// off of buf, leaving block Rank() complete. A segment that spans pieces
// of buf travels as one message a piece (algo.Vec); a flat buf's segments
// are one message each.
func (o Options) reduceScatter(ctx context.Context, p algo.Peers, buf algo.Vec, off []int) (err error) {
	n, r := p.Size(), p.Rank()
	if n == 1 {
		return nil
	}
	seg := algo.SegmentLen(algo.SegmentFor(p, o.SegmentBytes), p.ElemSize())
	maxBlock := 0
	for i := 0; i < n; i++ {
		maxBlock = max(maxBlock, off[i+1]-off[i])
	}
	half := min(seg, maxBlock)
	scr := algo.GetScratch(p, 2*half)
	defer func() {
		if err == nil {
			algo.PutScratch(p, scr)
		}
	}()
	tmp := [2][]byte{scr[:half], scr[half:]}
	right, left := (r+1)%n, mod(r-1, n)
	// in[k%2] holds the receives of segment k; a flat buffer's are one
	// request each, held in the arrays below without an allocation.
	var in [2][]algo.Request
	var inl [2][1]algo.Request
	in[0], in[1] = inl[0][:0], inl[1][:0]
	var sendInl [2]algo.Request // a step's sends, without an allocation for the first two
	sends := sendInl[:0]
	for s := 1; s < n; s++ {
		sb, rb := mod(r-s, n), mod(r-s-1, n)
		slo, shi, rlo, rhi := off[sb], off[sb+1], off[rb], off[rb+1]
		sends = sends[:0]
		if rhi > rlo {
			in[0] = algo.RecvRangeInto(p, left, buf, rlo, min(rlo+seg, rhi), tmp[0], in[0][:0])
		}
		for lo := slo; lo < shi; lo += seg {
			sends = algo.SendRange(p, right, buf, lo, min(lo+seg, shi), sends)
		}
		for k, lo := 0, rlo; lo < rhi; k, lo = k+1, lo+seg {
			if err := algo.WaitAll(ctx, in[k%2]...); err != nil {
				return fmt.Errorf("step %d: recv from rank %d: %w", s, left, err)
			}
			hi := min(lo+seg, rhi)
			if hi < rhi {
				next := (k + 1) % 2
				in[next] = algo.RecvRangeInto(p, left, buf, hi, min(hi+seg, rhi), tmp[next], in[next][:0])
			}
			if err := algo.ReduceRange(p, buf, lo, hi, tmp[k%2][:hi-lo]); err != nil {
				return fmt.Errorf("step %d: reduce: %w", s, err)
			}
		}
		if err := algo.WaitAll(ctx, sends...); err != nil {
			return fmt.Errorf("step %d: send to rank %d: %w", s, right, err)
		}
	}
	return nil
}
