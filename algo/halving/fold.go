package halving

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

// group is a rank's place in the power-of-two group left after the fold-in.
type group struct {
	n, r   int // real size and rank
	p, rem int // p = 2^⌊log2 n⌋, rem = n - p
	v      int // new rank in [0, p), or -1 for a rank folded out
}

func newGroup(n, r int) group {
	p := 1 << algo.Log2(n)
	g := group{n: n, r: r, p: p, rem: n - p, v: -1}
	switch {
	case r >= 2*g.rem:
		g.v = r - g.rem
	case r%2 == 1:
		g.v = r / 2
	}
	return g
}

// extra reports whether this rank is folded out (an even rank below 2·rem).
func (g group) extra() bool { return g.v < 0 }

// partner of a rank below 2·rem: the odd rank for an even one and back.
func (g group) partner() int { return g.r ^ 1 }

// folding reports whether this rank is an odd rank that stands in for a
// folded-out partner.
func (g group) folding() bool { return g.r < 2*g.rem && g.r%2 == 1 }

// real returns the real rank of new rank v.
func (g group) real(v int) int {
	if v < g.rem {
		return 2*v + 1
	}
	return v + g.rem
}

// first returns the first real rank that new rank v stands for: the blocks
// of real ranks first(v) .. first(v+1)-1 form its super-block.
func (g group) first(v int) int {
	if v < g.rem {
		return 2 * v
	}
	return v + g.rem
}

// superOffsets maps the byte offsets of n real-rank blocks to the offsets of
// the p super-blocks.
func (g group) superOffsets(off []int) []int {
	s := make([]int, g.p+1)
	for v := 0; v < g.p; v++ {
		s[v] = off[g.first(v)]
	}
	s[g.p] = off[g.n]
	return s
}

// halvingReduceScatter runs the power-of-two recursive-halving
// reduce-scatter among the new ranks over the p blocks at byte offsets off,
// leaving block g.v reduced in buf. tmp holds at least half of buf.
func halvingReduceScatter(ctx context.Context, p algo.Peers, g group, buf, tmp []byte, off []int) error {
	lo, hi := 0, g.p
	for mask := g.p / 2; mask >= 1; mask /= 2 {
		pv := g.v ^ mask
		partner := g.real(pv)
		mid := lo + mask
		keepLo, keepHi, sendLo, sendHi := lo, mid, mid, hi
		if g.v&mask != 0 {
			keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid
		}
		keep := buf[off[keepLo]:off[keepHi]]
		in := tmp[:len(keep)]
		if err := algo.Exchange(ctx, p, partner, buf[off[sendLo]:off[sendHi]], partner, in); err != nil {
			return fmt.Errorf("halving round %d: %w", algo.Log2(mask), err)
		}
		if len(keep) > 0 {
			if err := p.Reduce(keep, in); err != nil {
				return fmt.Errorf("halving round %d: reduce: %w", algo.Log2(mask), err)
			}
		}
		lo, hi = keepLo, keepHi
	}
	return nil
}

// doublingAllGather runs the power-of-two recursive-doubling allgather among
// the new ranks over the p blocks at byte offsets off, starting from block
// g.v and leaving every block in buf.
func doublingAllGather(ctx context.Context, p algo.Peers, g group, buf []byte, off []int) error {
	for mask := 1; mask < g.p; mask *= 2 {
		pv := g.v ^ mask
		partner := g.real(pv)
		mine, theirs := g.v&^(mask-1), pv&^(mask-1)
		send := buf[off[mine]:off[mine+mask]]
		recv := buf[off[theirs]:off[theirs+mask]]
		if err := algo.Exchange(ctx, p, partner, send, partner, recv); err != nil {
			return fmt.Errorf("doubling round %d: %w", algo.Log2(mask), err)
		}
	}
	return nil
}

// foldIn sends an extra rank's whole buf to its partner, which reduces it
// into its own buf (tmp holds len(buf) bytes).
func foldIn(ctx context.Context, p algo.Peers, g group, buf, tmp []byte) error {
	if len(buf) == 0 {
		return nil
	}
	switch {
	case g.extra():
		if err := algo.Send(ctx, p, g.partner(), buf); err != nil {
			return fmt.Errorf("fold-in: %w", err)
		}
	case g.folding():
		if err := algo.Recv(ctx, p, g.partner(), tmp); err != nil {
			return fmt.Errorf("fold-in: %w", err)
		}
		if err := p.Reduce(buf, tmp); err != nil {
			return fmt.Errorf("fold-in: reduce: %w", err)
		}
	}
	return nil
}

// foldOut sends the folding rank's b to its extra partner, which receives
// it into its own b. Empty b sends nothing.
func foldOut(ctx context.Context, p algo.Peers, g group, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	switch {
	case g.extra():
		if err := algo.Recv(ctx, p, g.partner(), b); err != nil {
			return fmt.Errorf("fold-out: %w", err)
		}
	case g.folding():
		if err := algo.Send(ctx, p, g.partner(), b); err != nil {
			return fmt.Errorf("fold-out: %w", err)
		}
	}
	return nil
}
