// Ring allgather.
//
// Rank r starts with its own block r in place. In step s (s = 1..n-1) rank r
// sends block r-s+1 to rank r+1 and receives block r-s from rank r-1
// (mod n), straight into its place in the buffer; the block it forwards in
// step s+1 is the one it has just received. Four ranks, blocks A B C D:
//
//	         rank 0      rank 1      rank 2      rank 3
//	start:   A           B           C           D
//	step 1:  A -> 1      B -> 2      C -> 3      D -> 0
//	step 2:  D -> 1      A -> 2      B -> 3      C -> 0
//	step 3:  C -> 1      D -> 2      A -> 3      B -> 0
//	after:   A B C D everywhere
//
// Blocks may have any sizes (counts); an empty block is not sent. No
// reduction happens, so each block is sent whole, in one message.
//
// Cost, with N the bytes of the whole gathered buffer and equal blocks:
//
//	T = (n-1)·α + (n-1)/n·N·β
//
// Counted exactly: every rank sends every block except block r+1 and
// receives every block except its own, one message per non-empty block.

package ring

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

// AllGather gathers every rank's block into every buf with the zero Options.
func AllGather(ctx context.Context, p algo.Peers, buf []byte, counts []int) error {
	return Options{}.AllGather(ctx, p, buf, counts)
}

// AllGather starts with this rank's block (counts[Rank()] elements at its
// offset) in place in buf and leaves every rank's block in every buf. It
// has the shape of algo.AllGatherFunc.
func (o Options) AllGather(ctx context.Context, p algo.Peers, buf []byte, counts []int) error {
	if err := algo.CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("ring allgather: %w", err)
	}
	if err := allGather(ctx, p, algo.Flat(buf), algo.Offsets(counts, p.ElemSize())); err != nil {
		return fmt.Errorf("ring allgather: %w", err)
	}
	return nil
}

// AllGatherVec is AllGather over a buffer made of pieces (algo.Vec): block
// i holds counts[i] elements of the run, which may span pieces, and each
// piece of a block travels as a message of its own. Every rank's pieces
// must have the same lengths.
func (o Options) AllGatherVec(ctx context.Context, p algo.Peers, buf algo.Vec, counts []int) error {
	if err := algo.CheckBlocksLen(p, buf.Len(), counts); err != nil {
		return fmt.Errorf("ring allgather: %w", err)
	}
	if err := allGather(ctx, p, buf, algo.Offsets(counts, p.ElemSize())); err != nil {
		return fmt.Errorf("ring allgather: %w", err)
	}
	return nil
}

// allGather circulates the blocks at byte offsets off of buf, starting
// from block Rank(). Each step posts the receive, then the send (a
// full-duplex exchange); an empty block is not sent.
func allGather(ctx context.Context, p algo.Peers, buf algo.Vec, off []int) error {
	n, r := p.Size(), p.Rank()
	right, left := (r+1)%n, mod(r-1, n)
	var inl [2]algo.Request // a flat buffer's step: one receive, one send
	for s := 1; s < n; s++ {
		sb, rb := mod(r-s+1, n), mod(r-s, n)
		reqs := algo.RecvRange(p, left, buf, off[rb], off[rb+1], inl[:0])
		recvs := len(reqs)
		reqs = algo.SendRange(p, right, buf, off[sb], off[sb+1], reqs)
		if err := algo.WaitAll(ctx, reqs[:recvs]...); err != nil {
			return fmt.Errorf("step %d: recv from rank %d: %w", s, left, err)
		}
		if err := algo.WaitAll(ctx, reqs[recvs:]...); err != nil {
			return fmt.Errorf("step %d: send to rank %d: %w", s, right, err)
		}
	}
	return nil
}
