// Recursive-doubling allreduce.
//
// In round k (k = 0..log2(p)-1) every rank swaps its whole buffer with the
// partner whose rank differs in bit k and reduces what it receives into its
// own. After round k each rank holds the reduction over a group of 2^(k+1)
// ranks; after log2(p) rounds, over everyone. Four ranks, values a b c d:
//
//	round 0:  0 <-> 1         2 <-> 3           0,1 hold ab; 2,3 hold cd
//	round 1:  0 <-> 2         1 <-> 3           all hold abcd
//
// Both partners compute the same value with the lower rank's operand on the
// left (lower op higher), so every rank ends with bit-identical bytes even
// when the reduction is not exactly commutative. The higher partner reduces
// into its scratch copy and copies the result back.
//
// Non-powers of two use the fold-in (see the package doc): an extra rank
// sends its buffer to its partner before the rounds and receives the result
// after them.
//
// Cost, with p = 2^⌊log2 n⌋ and N the bytes of the buffer:
//
//	T = log2(p)·(α + N·β + N·γ)                     n = p
//	  + α + (2 + log2(p)/2)·N·β + N·γ                extra for n ≠ p
//
// The fold-in's α overlaps the first round of the ranks that do not fold,
// so one α shows, not two. Its bytes share the folding rank's link with
// the first round's, and the delay spreads through the rounds as partners
// wait for each other: the simulator measures 1 to 4.6 N·β beyond the
// fold's 2N·β, growing with log2(p) but not evenly (1 at n = 6, 12, 24,
// 48; 2 at 7 and 13; 4 at 65); log2(p)/2 is a fit, 0.75x..1.3x of the
// simulated time.
//
// Counted exactly (N > 0): each of the p ranks in the rounds sends and
// receives log2(p) messages of N bytes; a folding rank one more each way;
// an extra rank sends one and receives one. Latency-optimal, so it is the
// choice for small messages; the N·β per round makes it poor for large ones.

package halving

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

var _ algo.AllReduceFunc = DoublingAllReduce

// DoublingAllReduce reduces buf across the group in place by recursive
// doubling. It has the shape of algo.AllReduceFunc.
func DoublingAllReduce(ctx context.Context, p algo.Peers, buf []byte) (err error) {
	es := p.ElemSize()
	if es <= 0 || len(buf)%es != 0 {
		return fmt.Errorf("doubling allreduce: buffer of %d bytes is not whole elements of %d bytes", len(buf), es)
	}
	if p.Size() == 1 || len(buf) == 0 {
		return nil
	}
	g := newGroup(p.Size(), p.Rank())
	scr := algo.GetScratch(p, len(buf))
	defer func() {
		if err == nil {
			algo.PutScratch(p, scr)
		}
	}()
	tmp := scr
	if err := foldIn(ctx, p, g, buf, tmp); err != nil {
		return fmt.Errorf("doubling allreduce: %w", err)
	}
	if !g.extra() {
		for mask := 1; mask < g.p; mask *= 2 {
			pv := g.v ^ mask
			partner := g.real(pv)
			if err := algo.Exchange(ctx, p, partner, buf, partner, tmp); err != nil {
				return fmt.Errorf("doubling allreduce round %d: %w", algo.Log2(mask), err)
			}
			if g.v < pv {
				err = p.Reduce(buf, tmp) // mine op theirs
			} else {
				if err = p.Reduce(tmp, buf); err == nil { // theirs op mine
					err = algo.Copy(p, buf, tmp)
				}
			}
			if err != nil {
				return fmt.Errorf("doubling allreduce round %d: reduce: %w", algo.Log2(mask), err)
			}
		}
	}
	if err := foldOut(ctx, p, g, buf); err != nil {
		return fmt.Errorf("doubling allreduce: %w", err)
	}
	return nil
}
