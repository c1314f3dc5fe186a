// Binomial gather.
//
// The reduce tree, but instead of reducing, each rank forwards everything
// its subtree has gathered: the blocks of a contiguous range of ranks
// (relative to the root), received straight into their places in the
// buffer. Four ranks, root 0, blocks A B C D:
//
//	round 1:  1 -B-> 0      3 -D-> 2
//	round 2:  2 -CD-> 0                 (0 holds A B C D)
//
// With a root other than 0 a subtree's range of real ranks may wrap past
// n-1 to 0; it then travels as two messages, one per contiguous piece.
// Blocks may have any sizes (counts); empty pieces are not sent.
//
// Cost, with N the bytes of the gathered buffer and equal blocks:
//
//	T = ⌈log2 n⌉·α + (n-1)/n·N·β
//
// Counted exactly: every rank but the root sends its subtree's blocks to
// its parent (one message per non-empty piece); the root receives
// N minus its own block.

package tree

import (
	"context"
	"fmt"
	"slices"

	"github.com/goccl/goccl/algo"
)

var _ algo.GatherFunc = Gather

// Gather collects every rank's block (counts[i] elements, in place in rank
// i's buf) into root's buf along a binomial tree. Other ranks' buf is
// scratch afterwards.
func Gather(ctx context.Context, p algo.Peers, buf []byte, counts []int, root int) error {
	if err := algo.CheckRoot(p, root); err != nil {
		return fmt.Errorf("tree gather: %w", err)
	}
	if err := algo.CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("tree gather: %w", err)
	}
	n := p.Size()
	off := algo.Offsets(counts, p.ElemSize())
	v := mod(p.Rank()-root, n)
	kids := children(v, n)
	slices.Reverse(kids)
	// Post every receive first: they target disjoint parts of buf.
	var reqs []algo.Request
	var froms []int
	for _, m := range kids {
		c := v + m
		lo, hi := subtree(c, n)
		for _, pc := range pieces(off, root, lo, hi) {
			reqs = append(reqs, p.Irecv((c+root)%n, buf[pc[0]:pc[1]]))
			froms = append(froms, (c+root)%n)
		}
	}
	for i, r := range reqs {
		if err := r.Wait(ctx); err != nil {
			return fmt.Errorf("tree gather: recv from rank %d: %w", froms[i], err)
		}
	}
	if v > 0 {
		parent := (v - lowbit(v) + root) % n
		lo, hi := subtree(v, n)
		for _, pc := range pieces(off, root, lo, hi) {
			if err := algo.Send(ctx, p, parent, buf[pc[0]:pc[1]]); err != nil {
				return fmt.Errorf("tree gather: %w", err)
			}
		}
	}
	return nil
}
