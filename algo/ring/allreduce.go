// Ring allreduce.
//
// Allreduce = reduce-scatter + allgather. The buffer of N bytes is cut into
// n blocks on element boundaries; n-1 reduce-scatter steps leave block r
// complete at rank r (see reducescatter.go), and n-1 allgather steps copy
// each complete block around the ring (see allgather.go). Four ranks, blocks
// A B C D, "*" marking a block reduced over all ranks:
//
//	        reduce-scatter                      allgather
//	step    1       2       3                   4       5       6
//	rank 0  D  ->1  C  ->1  B  ->1  (A* at 0)   A* ->1  D* ->1  C* ->1
//	rank 1  A  ->2  D  ->2  C  ->2  (B* at 1)   B* ->2  A* ->2  D* ->2
//	rank 2  B  ->3  A  ->3  D  ->3  (C* at 2)   C* ->3  B* ->3  A* ->3
//	rank 3  C  ->0  B  ->0  A  ->0  (D* at 3)   D* ->0  C* ->0  B* ->0
//
// The same run for a buffer of 10 int64 (blocks of 3, 3, 2 and 2 elements:
// A and B are 24 bytes, C and D 16), as recorded by algotest in
// testdata/ring_allreduce_4.txt:
//
//	step 1: rank 0 -> rank 1: 16 bytes
//	step 1: rank 1 -> rank 2: 24 bytes
//	step 1: rank 2 -> rank 3: 24 bytes
//	step 1: rank 3 -> rank 0: 16 bytes
//	step 2: rank 0 -> rank 1: 16 bytes
//	step 2: rank 1 -> rank 2: 16 bytes
//	step 2: rank 2 -> rank 3: 24 bytes
//	step 2: rank 3 -> rank 0: 24 bytes
//	step 3: rank 0 -> rank 1: 24 bytes
//	step 3: rank 1 -> rank 2: 16 bytes
//	step 3: rank 2 -> rank 3: 16 bytes
//	step 3: rank 3 -> rank 0: 24 bytes
//	step 4: rank 0 -> rank 1: 24 bytes
//	step 4: rank 1 -> rank 2: 24 bytes
//	step 4: rank 2 -> rank 3: 16 bytes
//	step 4: rank 3 -> rank 0: 16 bytes
//	step 5: rank 0 -> rank 1: 16 bytes
//	step 5: rank 1 -> rank 2: 24 bytes
//	step 5: rank 2 -> rank 3: 24 bytes
//	step 5: rank 3 -> rank 0: 16 bytes
//	step 6: rank 0 -> rank 1: 16 bytes
//	step 6: rank 1 -> rank 2: 16 bytes
//	step 6: rank 2 -> rank 3: 24 bytes
//	step 6: rank 3 -> rank 0: 24 bytes
//
// Every element of the result is reduced by exactly one rank (the block's
// owner) and copied to the others, so all ranks end with bit-identical
// bytes even for floating point.
//
// Cost:
//
//	T = 2(n-1)·α + 2(n-1)/n·N·β + (n-1)·s·γ        (γ ≤ β)
//
// with s the bytes of a block's last segment: the reduce-scatter hides all
// but the last segment's reduction of each step behind the transfer of the
// next (see reducescatter.go). That is why the ring beats Rabenseifner's
// halving for large buffers although both send 2(n-1)/n·N bytes.
//
// Counted exactly: rank r sends each block b ≠ r in the reduce-scatter
// (⌈B_b/seg⌉ messages each) and each block b ≠ r+1 in the allgather (one
// message each), skipping empty blocks; it receives blocks b ≠ r-1, then
// b ≠ r; it sends 2(n-1)/n·N bytes when n
// divides the element count.

package ring

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

// AllReduce reduces buf across the ring in place with the zero Options.
func AllReduce(ctx context.Context, p algo.Peers, buf []byte) error {
	return Options{}.AllReduce(ctx, p, buf)
}

// AllReduce reduces buf across the ring in place: every rank ends with the
// reduction of every rank's buf. It has the shape of algo.AllReduceFunc.
func (o Options) AllReduce(ctx context.Context, p algo.Peers, buf []byte) error {
	es := p.ElemSize()
	if es <= 0 || len(buf)%es != 0 {
		return fmt.Errorf("ring allreduce: buffer of %d bytes is not whole elements of %d bytes", len(buf), es)
	}
	return o.allReduce(ctx, p, algo.Flat(buf))
}

// AllReduceVec is AllReduce over a buffer made of pieces (algo.Vec), such
// as the caller's slices of a coalesced allreduce: the blocks and segments
// are cut from the whole run, and a segment that spans pieces travels as
// one message a piece, so no piece is copied into a packed buffer. Every
// rank's pieces must have the same lengths.
func (o Options) AllReduceVec(ctx context.Context, p algo.Peers, buf algo.Vec) error {
	if es := p.ElemSize(); es <= 0 || buf.Len()%es != 0 {
		return fmt.Errorf("ring allreduce: buffer of %d bytes is not whole elements of %d bytes", buf.Len(), es)
	}
	return o.allReduce(ctx, p, buf)
}

func (o Options) allReduce(ctx context.Context, p algo.Peers, buf algo.Vec) error {
	es := p.ElemSize()
	off := algo.Offsets(algo.EvenCounts(buf.Len()/es, p.Size()), es)
	if err := o.reduceScatter(ctx, p, buf, off); err != nil {
		return fmt.Errorf("ring allreduce: reduce-scatter: %w", err)
	}
	if err := allGather(ctx, p, buf, off); err != nil {
		return fmt.Errorf("ring allreduce: allgather: %w", err)
	}
	return nil
}
