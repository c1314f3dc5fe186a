// Binomial reduce.
//
// The broadcast tree run backwards: each rank receives the partial results
// of its children, smallest subtree first (they finish first), reduces each
// into its buffer, and sends the total to its parent. Four ranks, root 0:
//
//	round 1:  1 -> 0      3 -> 2        (0 holds ab, 2 holds cd)
//	round 2:  2 -> 0                    (0 holds abcd)
//
// The receive from the next child is posted before the current one is
// reduced, into the second of two scratch buffers.
//
// Cost, with N the bytes of the buffer:
//
//	T = ⌈log2 n⌉·(α + N·β + N·γ)
//
// Counted exactly (N > 0): every rank but the root sends one message of N
// bytes; each rank receives one from each of its children.

package tree

import (
	"context"
	"fmt"
	"slices"

	"github.com/goccl/goccl/algo"
)

var _ algo.ReduceFunc = Reduce

// Reduce leaves the reduction of every rank's buf in root's buf, along a
// binomial tree. Other ranks' buf is scratch afterwards.
func Reduce(ctx context.Context, p algo.Peers, buf []byte, root int) (err error) {
	if err := algo.CheckRoot(p, root); err != nil {
		return fmt.Errorf("tree reduce: %w", err)
	}
	n := p.Size()
	if n == 1 || len(buf) == 0 {
		return nil
	}
	v := mod(p.Rank()-root, n)
	kids := children(v, n)
	slices.Reverse(kids) // smallest subtree first
	if len(kids) > 0 {
		scr := algo.GetScratch(p, 2*len(buf))
		defer func() {
			if err == nil {
				algo.PutScratch(p, scr)
			}
		}()
		tmp := [2][]byte{scr[:len(buf)], scr[len(buf):]}
		from := func(i int) int { return (v + kids[i] + root) % n }
		cur := p.Irecv(from(0), tmp[0])
		for i := range kids {
			if err := cur.Wait(ctx); err != nil {
				return fmt.Errorf("tree reduce: recv from rank %d: %w", from(i), err)
			}
			if i+1 < len(kids) {
				cur = p.Irecv(from(i+1), tmp[(i+1)%2])
			}
			if err := p.Reduce(buf, tmp[i%2]); err != nil {
				return fmt.Errorf("tree reduce: reduce: %w", err)
			}
		}
	}
	if v > 0 {
		if err := algo.Send(ctx, p, (v-lowbit(v)+root)%n, buf); err != nil {
			return fmt.Errorf("tree reduce: %w", err)
		}
	}
	return nil
}
