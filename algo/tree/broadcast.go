// Binomial broadcast.
//
// The root sends the whole buffer to the root of the larger half of the
// remaining ranks, then of the next half, and so on; every rank that has
// received does the same within its subtree. Four ranks, root 0:
//
//	round 1:  0 -> 2
//	round 2:  0 -> 1      2 -> 3
//
// Cost, with N the bytes of the buffer, for n a power of two:
//
//	T = log2(n)·(α + N·β)
//
// A rank sends to its children one after the other, each send leaving N·β
// after the one before and arriving α later, so for other n the latencies
// of a rank's later sends overlap its earlier ones: three ranks take
// α + 2N·β, not 2(α + N·β). algo.Cost has the exact recursion (W in its
// table), which the simulator matches.
//
// Counted exactly (N > 0): every rank but the root receives one message of
// N bytes; rank v (relative to the root) sends one to each of its children,
// v + 2^j for 2^j below v's lowest set bit. The root sends ⌈log2 n⌉.

package tree

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

var _ algo.BroadcastFunc = Broadcast

// Broadcast copies root's buf into every rank's buf along a binomial tree.
func Broadcast(ctx context.Context, p algo.Peers, buf []byte, root int) error {
	if err := algo.CheckRoot(p, root); err != nil {
		return fmt.Errorf("tree broadcast: %w", err)
	}
	n := p.Size()
	if n == 1 || len(buf) == 0 {
		return nil
	}
	v := mod(p.Rank()-root, n)
	if v > 0 {
		parent := (v - lowbit(v) + root) % n
		if err := algo.Recv(ctx, p, parent, buf); err != nil {
			return fmt.Errorf("tree broadcast: %w", err)
		}
	}
	for _, m := range children(v, n) {
		if err := algo.Send(ctx, p, (v+m+root)%n, buf); err != nil {
			return fmt.Errorf("tree broadcast: %w", err)
		}
	}
	return nil
}
