// Two-level reduce.
//
// The broadcast's steps run backwards: with the root at rank h·L + j,
// every host reduces to its rank j, and those reduce across hosts to the
// root. Two hosts of two ranks, root 0 ("x01" is the buffer reduced over
// ranks 0 and 1):
//
//	                host 0              host 1
//	                rank 0    rank 1    rank 2    rank 3
//	within hosts    (x01)     x1 ->0    (x23)     x3 ->2
//	across hosts    (x*)                x23 ->0
//
// Both phases run the binomial tree (the only reduce of package algo's
// families). Only the root's local index crosses hosts, one message a NIC
// at a time.
//
// Cost in the two-level model, N the bytes of the buffer:
//
//	T = ⌈log2 L⌉·(αi + N·βi + N·γ) + ⌈log2 H⌉·(αe + N·βe + N·γ)
//
// the flat binomial tree's cost when the root is a host's first rank
// (its rounds within a host come first there too), and less than it for
// another root, whose flat tree crosses hosts in rounds within a block
// of L.
//
// Counted exactly (N > 0): every rank but rank j of its host sends N
// bytes within its host, and rank j of every host but the root's sends N
// bytes to another host (TestReduceBytes).

package twolevel

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/tree"
)

var _ algo.ReduceFunc = Reduce

// Reduce leaves the reduction of every rank's buf in root's buf: within
// the hosts, then across them. Other ranks' buf is scratch afterwards.
func Reduce(ctx context.Context, p algo.Peers, buf []byte, root int) error {
	if err := algo.CheckRoot(p, root); err != nil {
		return fmt.Errorf("twolevel reduce: %w", err)
	}
	l, ok := layoutOf(p, algo.Reduce, len(buf))
	if !ok {
		return tree.Reduce(ctx, p, buf, root)
	}
	if len(buf) == 0 {
		return nil
	}
	rh, rj := root/l.L, root%l.L
	if err := tree.Reduce(ctx, l.within(p), buf, rj); err != nil {
		return fmt.Errorf("twolevel reduce: within host %d: %w", l.h, err)
	}
	if l.j == rj {
		if err := tree.Reduce(ctx, l.across(p, rj), buf, rh); err != nil {
			return fmt.Errorf("twolevel reduce: across hosts, local rank %d: %w", rj, err)
		}
	}
	return nil
}
