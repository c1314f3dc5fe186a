// Double-binary-tree allreduce.
//
// The buffer is split into two halves; half t is reduced up binary tree t
// to its root and broadcast back down the same tree. The trees are in-order
// binary trees over positions 1..n (the children of position v are
// v ± lowbit(v)/2, cut off at n); tree 0 puts rank v-1 at position v, tree 1
// mirrors it (rank n-v) for even n and shifts it (rank v mod n) for odd n,
// so a rank that is a leaf of one tree is, as far as possible, an inner node
// of the other. Four ranks:
//
//	tree 0 (half 0)       tree 1 (half 1)
//	      3                     0
//	      |                     |
//	      1                     2
//	     / \                   / \
//	    0   2                 3   1
//
// Each half is cut into S segments of at most Options.SegmentBytes, and the
// work runs as a schedule of slots that every rank follows in the same
// order. With h = ⌊log2 n⌋ and δ a rank's depth in a tree (0 at the root,
// at most h), in slot i a rank does, for both trees, "up" for segment
// i-(h-δ) (receive the children's partial sums, reduce them into the
// segment, send it to the parent), then, for both trees, "down" for segment
// i-(h+δ) (receive the result from the parent, send it to the children).
// A child is one level deeper than its parent, so every message is
// received exactly one slot after it was sent: no wait in slot i depends on
// anything another rank does in slot i, and segment k climbs one level a
// slot while segment k+1 follows one level below it (a pipeline, as in
// NCCL's trees). Segment 0's trip through tree 0 of the picture above
// (h = 2; ranks 0 and 2 at depth 2, rank 1 at depth 1, rank 3 the root):
//
//	slot 0:  0 -> 1, 2 -> 1     (depth 2 sends segment 0 up)
//	slot 1:  1 -> 3             (depth 1 reduces it and sends it up)
//	slot 2:  3 -> 1             (the root reduces it and sends it down)
//	slot 3:  1 -> 0, 1 -> 2     (depth 1 passes it down)
//
// while segment 1 makes the same trip one slot behind.
//
// A rank sends at most one message per tree and direction a slot, in the
// same order (up tree 0, up tree 1, down tree 0, down tree 1) as its peer
// posts the receives a slot later, so FIFO matching needs no tags, and
// segments of both trees flow up and down at once. Each segment's result
// is computed only at its tree's root and copied down, so all ranks end
// bit-identical.
//
// This is the double binary tree (as in NCCL), not a reduce followed by a
// broadcast over one tree: each rank is an inner node of at most one tree,
// so no rank has to receive or send much more than the others.
//
// Cost, with N the bytes of the buffer, h = ⌊log2 n⌋ the depth of the
// trees, S = ⌈N/(2·seg)⌉ segments per half of m = min(seg, N/2) bytes:
//
//	T ≈ (2h + S - 1)·α + 2N·β + N·γ + (h-1)·(4m·β + 2m·γ)      n ≥ 4
//
// The first segment takes 2h slots up and down the tree, the others
// follow one slot apart. In a full slot a rank that is inner in one tree
// and a leaf in the other sends 4 segments (up each tree, down to two
// children) and receives 4, so S slots carry 2N·β; it reduces two
// children's segments, N·γ in all. The fill adds, per level of the trip,
// one receive of two children's segments on the way up and one send to
// two children on the way down (2m·β each) and two reductions. For n = 2
// and 3 no rank sends 4 segments a slot: the β term is n/2·N·β, and for
// n = 2 the γ term N/2·γ. Checked against the simulator (sim's
// costmodel_test.go) this is within 0.75x..1.35x: below it for a few
// segments on few ranks (the top of the tree has one child for n a power
// of two, so the fill's first and last steps carry one segment, not two),
// above it for many segments (a slot ends when its slowest transfer does,
// so links idle between slots: 1.33x at 100 ranks and 256 MiB).
//
// Before this schedule the down step of slot i waited for the up sweep
// of slot i to reach the root, so each slot cost a whole round trip of the
// tree: 6x the formula at 16 ranks and 11x at 128 (16 MiB).
//
// Counted exactly: in tree t, a rank with c children and a parent sends
// (c + 1)·S_t messages and (c + 1)·H_t bytes, H_t being the bytes of
// half t; it receives the same. A root has no parent term.

package tree

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

// Options tunes the tree allreduce. The zero value is ready to use.
type Options struct {
	// SegmentBytes is the largest message, rounded down to whole elements,
	// that the allreduce sends at once. Zero means the Peers' own
	// (algo.Segmenter) or else algo.DefaultSegmentBytes.
	SegmentBytes int
}

var _ algo.AllReduceFunc = AllReduce

// AllReduce reduces buf in place over a double binary tree with the zero
// Options.
func AllReduce(ctx context.Context, p algo.Peers, buf []byte) error {
	return Options{}.AllReduce(ctx, p, buf)
}

// Node is a rank's place in one binary tree: its parent (-1 at the root)
// and children, as real ranks, and its depth (0 at the root, at most
// ⌊log2 n⌋).
type Node struct {
	Parent   int
	Children []int
	Depth    int
}

// DoubleTree returns rank r's place in tree 0 and tree 1 of a group of n.
func DoubleTree(n, r int) [2]Node {
	var out [2]Node
	for t := range 2 {
		rank := func(v int) int { // position 1..n -> rank
			switch {
			case t == 0:
				return v - 1
			case n%2 == 0:
				return n - v
			default:
				return v % n
			}
		}
		parent := make([]int, n+1)
		kids := make([][]int, n+1)
		root := 1
		for root*2 <= n {
			root *= 2
		}
		parent[root] = 0
		for v := 1; v <= n; v++ {
			l := lowbit(v)
			if l == 1 {
				continue
			}
			kids[v] = append(kids[v], v-l/2)
			parent[v-l/2] = v
			if v+1 <= n {
				m := min(n, v+l-1) - v // right subtree spans v+1 .. v+m
				h := 1
				for h*2 <= m {
					h *= 2
				}
				kids[v] = append(kids[v], v+h)
				parent[v+h] = v
			}
		}
		for v := 1; v <= n; v++ {
			if rank(v) != r {
				continue
			}
			out[t].Parent = -1
			if parent[v] != 0 {
				out[t].Parent = rank(parent[v])
			}
			for u := parent[v]; u != 0; u = parent[u] {
				out[t].Depth++
			}
			for _, c := range kids[v] {
				out[t].Children = append(out[t].Children, rank(c))
			}
		}
	}
	return out
}

// AllReduce reduces buf in place over a double binary tree: every rank ends
// with the reduction of every rank's buf. It has the shape of
// algo.AllReduceFunc.
func (o Options) AllReduce(ctx context.Context, p algo.Peers, buf []byte) (err error) {
	es := p.ElemSize()
	if es <= 0 || len(buf)%es != 0 {
		return fmt.Errorf("tree allreduce: buffer of %d bytes is not whole elements of %d bytes", len(buf), es)
	}
	n := p.Size()
	if n == 1 || len(buf) == 0 {
		return nil
	}
	trees := DoubleTree(n, p.Rank())
	seg := algo.SegmentLen(algo.SegmentFor(p, o.SegmentBytes), es)
	hoff := algo.Offsets(algo.EvenCounts(len(buf)/es, 2), es)
	half := [2][]byte{buf[hoff[0]:hoff[1]], buf[hoff[1]:hoff[2]]}
	nseg := [2]int{algo.Segments(len(half[0]), seg, es), algo.Segments(len(half[1]), seg, es)}
	sl := min(seg, len(half[0])) // half 0 is the larger
	scr := algo.GetScratch(p, 4*sl)
	defer func() {
		if err == nil {
			algo.PutScratch(p, scr)
		}
	}()
	segment := func(t, k int) []byte { return half[t][k*seg : min((k+1)*seg, len(half[t]))] }
	// Only a few slots' sends are outstanding at once, so their requests
	// live in rings (thousands of ranks with thousands of segments each
	// would otherwise hold every request to the end). Segment k's up send
	// leaves in slot k+h-δ and is waited for in slot k+h+δ: at most 2h+1
	// slots apart. Down sends are waited for three slots after they start.
	h := algo.Log2(n)
	w := 2*h + 2
	upSends := [2][]algo.Request{make([]algo.Request, w), make([]algo.Request, w)}
	var downSends [3][]algo.Request
	slot := 0

	up := func(t, k int) error {
		s, nd := segment(t, k), trees[t]
		var reqs [2]algo.Request
		for i, c := range nd.Children {
			reqs[i] = p.Irecv(c, scr[(2*t+i)*sl:][:len(s)])
		}
		for i, c := range nd.Children {
			if err := reqs[i].Wait(ctx); err != nil {
				return fmt.Errorf("tree %d up, segment %d: recv from rank %d: %w", t, k, c, err)
			}
			if err := p.Reduce(s, scr[(2*t+i)*sl:][:len(s)]); err != nil {
				return fmt.Errorf("tree %d up, segment %d: reduce: %w", t, k, err)
			}
		}
		if nd.Parent >= 0 {
			upSends[t][k%w] = p.Isend(nd.Parent, s)
		}
		return nil
	}
	down := func(t, k int) error {
		s, nd := segment(t, k), trees[t]
		if nd.Parent >= 0 {
			if err := upSends[t][k%w].Wait(ctx); err != nil {
				return fmt.Errorf("tree %d up, segment %d: send to rank %d: %w", t, k, nd.Parent, err)
			}
			if err := algo.Recv(ctx, p, nd.Parent, s); err != nil {
				return fmt.Errorf("tree %d down, segment %d: %w", t, k, err)
			}
		}
		for _, c := range nd.Children {
			downSends[slot%3] = append(downSends[slot%3], p.Isend(c, s))
		}
		return nil
	}

	// Slot i: up for segment i-(h-depth), then down for segment
	// i-(h+depth), in each tree. A message sent in slot i is received in
	// slot i+1 (see the doc comment), so no wait in a slot depends on
	// another rank's same slot and the segments pipeline.
	for i := 0; i < max(nseg[0], nseg[1])+2*h; i++ {
		slot = i
		if err := algo.WaitAll(ctx, downSends[i%3]...); err != nil {
			return fmt.Errorf("tree allreduce: send down: %w", err)
		}
		clear(downSends[i%3])
		downSends[i%3] = downSends[i%3][:0]
		for t := range 2 {
			if k := i - (h - trees[t].Depth); k >= 0 && k < nseg[t] {
				if err := up(t, k); err != nil {
					return fmt.Errorf("tree allreduce: %w", err)
				}
			}
		}
		for t := range 2 {
			if k := i - (h + trees[t].Depth); k >= 0 && k < nseg[t] {
				if err := down(t, k); err != nil {
					return fmt.Errorf("tree allreduce: %w", err)
				}
			}
		}
	}
	for _, ds := range downSends {
		if err := algo.WaitAll(ctx, ds...); err != nil {
			return fmt.Errorf("tree allreduce: send down: %w", err)
		}
	}
	return nil
}
