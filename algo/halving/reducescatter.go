// Recursive-halving reduce-scatter.
//
// The reduce-scatter half of Rabenseifner's allreduce (see rabenseifner.go):
// in each round a rank keeps the half of its range of blocks on its side of
// the round's bit, sends the other half to its partner and reduces the
// partner's copy of the kept half into its own. Four ranks, blocks A B C D:
//
//	round 0 (0<->2, 1<->3):  0 sends C D, keeps A B    2 sends A B, keeps C D
//	                         1 sends C D, keeps A B    3 sends A B, keeps C D
//	round 1 (0<->1, 2<->3):  0 sends B, keeps A*       1 sends A, keeps B*
//	                         2 sends D, keeps C*       3 sends C, keeps D*
//
// Blocks may have any sizes (counts). For a non-power of two the blocks of
// an extra rank and its partner form one super-block of the partner's:
// the extra rank sends its whole buffer first and receives its own reduced
// block from its partner at the end.
//
// Cost, with p = 2^⌊log2 n⌋ and N the bytes of the whole buffer:
//
//	T = log2(p)·α + (p-1)/p·N·β + (p-1)/p·N·γ       n = p
//	  + α + (1 + 1/n + (p-1)/p)·N·β + N·γ            extra for n ≠ p
//
// (the fold's terms as for the allreduce in rabenseifner.go; within 5% of
// the simulator for large buffers, up to 1.32x below 64 KiB).
//
// Counted exactly for n = p and equal non-empty blocks: each rank sends and
// receives log2(p) messages and (p-1)/p·N bytes. An extra rank sends N bytes
// in one message and receives its block of N/n bytes in one.

package halving

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

var _ algo.ReduceScatterFunc = ReduceScatter

// ReduceScatter reduces buf (block i holding counts[i] elements) across the
// group by recursive halving and leaves block Rank() reduced in place; the
// other blocks are scratch afterwards. It has the shape of
// algo.ReduceScatterFunc.
func ReduceScatter(ctx context.Context, p algo.Peers, buf []byte, counts []int) (err error) {
	if err := algo.CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("halving reduce-scatter: %w", err)
	}
	if p.Size() == 1 || len(buf) == 0 {
		return nil
	}
	g := newGroup(p.Size(), p.Rank())
	off := algo.Offsets(counts, p.ElemSize())
	scr := algo.GetScratch(p, len(buf))
	defer func() {
		if err == nil {
			algo.PutScratch(p, scr)
		}
	}()
	tmp := scr
	if err := foldIn(ctx, p, g, buf, tmp); err != nil {
		return fmt.Errorf("halving reduce-scatter: %w", err)
	}
	if !g.extra() {
		if err := halvingReduceScatter(ctx, p, g, buf, tmp, g.superOffsets(off)); err != nil {
			return fmt.Errorf("halving reduce-scatter: %w", err)
		}
	}
	// The extra rank's block is the first of its partner's super-block.
	e := g.r &^ 1
	if err := foldOut(ctx, p, g, buf[off[e]:off[e+1]]); err != nil {
		return fmt.Errorf("halving reduce-scatter: %w", err)
	}
	return nil
}
