package tree

// Binomial tree over ranks renumbered relative to the root: v = rank - root
// (mod n). The parent of v > 0 is v with its lowest set bit cleared; the
// children of v are v + 2^j for every 2^j below v's lowest set bit (below n
// for the root) with v + 2^j < n. Child v + 2^j has the subtree
// [v + 2^j, min(v + 2^(j+1), n)).

func mod(a, n int) int { return ((a % n) + n) % n }

func lowbit(v int) int { return v & -v }

// children returns the masks 2^j of v's children, largest first.
func children(v, n int) []int {
	top := lowbit(v)
	if v == 0 {
		top = 1
		for top < n {
			top <<= 1
		}
	}
	var c []int
	for m := top >> 1; m >= 1; m >>= 1 {
		if v+m < n {
			c = append(c, m)
		}
	}
	return c
}

// subtree returns the virtual ranks [lo, hi) of the subtree rooted at v.
func subtree(v, n int) (lo, hi int) {
	if v == 0 {
		return 0, n
	}
	return v, min(v+lowbit(v), n)
}

// pieces returns the byte ranges of buf that hold the blocks of virtual
// ranks [lo, hi) for the given root: one range, or two when the real ranks
// wrap past n-1 to 0. Empty ranges are left out.
func pieces(off []int, root, lo, hi int) [][2]int {
	n := len(off) - 1
	if lo >= hi {
		return nil
	}
	a, b := (root+lo)%n, (root+hi-1)%n // real ranks of the first and last block
	var ps [][2]int
	if a <= b {
		ps = append(ps, [2]int{off[a], off[b+1]})
	} else {
		ps = append(ps, [2]int{off[a], off[n]}, [2]int{off[0], off[b+1]})
	}
	out := ps[:0]
	for _, p := range ps {
		if p[1] > p[0] {
			out = append(out, p)
		}
	}
	return out
}
