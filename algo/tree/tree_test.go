package tree_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
	"github.com/goccl/goccl/algo/tree"
)

func TestBroadcast(t *testing.T) { algotest.TestBroadcast(t, tree.Broadcast) }
func TestReduce(t *testing.T)    { algotest.TestReduce(t, tree.Reduce) }
func TestGather(t *testing.T)    { algotest.TestGather(t, tree.Gather) }
func TestScatter(t *testing.T)   { algotest.TestScatter(t, tree.Scatter) }

func TestAllReduce(t *testing.T) {
	for name, o := range map[string]tree.Options{"default": {}, "seg24": {SegmentBytes: 24}, "seg1": {SegmentBytes: 1}} {
		t.Run(name, func(t *testing.T) { algotest.TestAllReduce(t, o.AllReduce) })
	}
}

// TestDoubleTree checks the picture in allreduce.go and that both trees
// span every rank with one root.
func TestDoubleTree(t *testing.T) {
	got := [4][2]tree.Node{}
	for r := range 4 {
		got[r] = tree.DoubleTree(4, r)
	}
	want := [4][2]tree.Node{
		{{Parent: 1, Depth: 2}, {Parent: -1, Children: []int{2}}},
		{{Parent: 3, Children: []int{0, 2}, Depth: 1}, {Parent: 2, Depth: 2}},
		{{Parent: 1, Depth: 2}, {Parent: 0, Children: []int{3, 1}, Depth: 1}},
		{{Parent: -1, Children: []int{1}}, {Parent: 2, Depth: 2}},
	}
	for r := range 4 {
		for tr := range 2 {
			g, w := got[r][tr], want[r][tr]
			if g.Parent != w.Parent || !slices.Equal(g.Children, w.Children) || g.Depth != w.Depth {
				t.Errorf("rank %d tree %d: %+v, want %+v", r, tr, g, w)
			}
		}
	}
	for n := 1; n <= 40; n++ {
		for tr := range 2 {
			roots, edges := 0, 0
			for r := range n {
				nd := tree.DoubleTree(n, r)[tr]
				if nd.Parent < 0 {
					roots++
				} else if !slices.Contains(tree.DoubleTree(n, nd.Parent)[tr].Children, r) {
					t.Errorf("n=%d tree %d: rank %d's parent %d does not list it", n, tr, r, nd.Parent)
				}
				edges += len(nd.Children)
				// The allreduce's schedule relies on these: a message
				// is received one slot after it is sent.
				if nd.Depth > algo.Log2(n) {
					t.Errorf("n=%d tree %d: rank %d at depth %d > log2 n", n, tr, r, nd.Depth)
				}
				for _, c := range nd.Children {
					if d := tree.DoubleTree(n, c)[tr].Depth; d != nd.Depth+1 {
						t.Errorf("n=%d tree %d: rank %d at depth %d has child %d at depth %d", n, tr, r, nd.Depth, c, d)
					}
				}
			}
			if roots != 1 || edges != n-1 {
				t.Errorf("n=%d tree %d: %d roots, %d edges", n, tr, roots, edges)
			}
		}
	}
}

func stats(t *testing.T, n int, fn func(ctx context.Context, p algo.Peers) error) *algotest.Stats {
	t.Helper()
	st, err := algotest.World{Size: n, ElemSize: 8, Reduce: algotest.SumInt64}.Run(context.Background(), fn)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCost holds each algorithm to the counts in its doc comment.
func TestCost(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for _, count := range []int{1, 7, 100, 2520} {
			N := 8 * count
			for root := range n {
				bc := stats(t, n, func(ctx context.Context, p algo.Peers) error { return tree.Broadcast(ctx, p, make([]byte, N), root) })
				rd := stats(t, n, func(ctx context.Context, p algo.Peers) error { return tree.Reduce(ctx, p, make([]byte, N), root) })
				sendTotal, recvTotal := 0, 0
				for r := range n {
					v := (r - root + n) % n
					kids := 0
					for m := 1; m < n; m *= 2 {
						if (v == 0 || m < v&-v) && v+m < n {
							kids++
						}
					}
					up := 1
					if v == 0 {
						up = 0
					}
					if g := bc.Sent[r]; g.Msgs != kids || g.Bytes != kids*N {
						t.Errorf("broadcast n=%d root=%d rank %d: sent %+v, want %d×%d", n, root, r, g, kids, N)
					}
					if g := bc.Recv[r]; g.Msgs != up || g.Bytes != up*N {
						t.Errorf("broadcast n=%d root=%d rank %d: received %+v", n, root, r, g)
					}
					if g := rd.Sent[r]; g.Msgs != up || g.Bytes != up*N {
						t.Errorf("reduce n=%d root=%d rank %d: sent %+v", n, root, r, g)
					}
					if g := rd.Recv[r]; g.Msgs != kids || g.Bytes != kids*N {
						t.Errorf("reduce n=%d root=%d rank %d: received %+v", n, root, r, g)
					}
					if v == 0 && kids != algo.CeilLog2(n) {
						t.Errorf("n=%d: root has %d children, want ⌈log2 n⌉ = %d", n, kids, algo.CeilLog2(n))
					}
					sendTotal += bc.Sent[r].Bytes
				}
				// Gather and scatter with equal blocks: the root receives
				// (sends) everything but its own block.
				counts := algo.EvenCounts(n*count, n)
				ga := stats(t, n, func(ctx context.Context, p algo.Peers) error {
					return tree.Gather(ctx, p, make([]byte, n*N), counts, root)
				})
				sc := stats(t, n, func(ctx context.Context, p algo.Peers) error {
					return tree.Scatter(ctx, p, make([]byte, n*N), counts, root)
				})
				if g := ga.Recv[root].Bytes; g != (n-1)*N {
					t.Errorf("gather n=%d root=%d: root received %d bytes, want (n-1)/n·N = %d", n, root, g, (n-1)*N)
				}
				if g := sc.Sent[root].Bytes; g != (n-1)*N {
					t.Errorf("scatter n=%d root=%d: root sent %d bytes, want (n-1)/n·N = %d", n, root, g, (n-1)*N)
				}
				for r := range n {
					recvTotal += bc.Recv[r].Bytes
				}
				if sendTotal != (n-1)*N || recvTotal != (n-1)*N {
					t.Errorf("broadcast n=%d: %d bytes sent, %d received, want (n-1)·N", n, sendTotal, recvTotal)
				}
			}
			// Allreduce: (c + 1)·S_t messages of each half per tree.
			for _, seg := range []int{0, 64} {
				o := tree.Options{SegmentBytes: seg}
				st := stats(t, n, func(ctx context.Context, p algo.Peers) error { return o.AllReduce(ctx, p, make([]byte, N)) })
				hc := algo.Offsets(algo.EvenCounts(count, 2), 8)
				for r := range n {
					var want algotest.Count
					for tr, nd := range tree.DoubleTree(n, r) {
						H := hc[tr+1] - hc[tr]
						links := len(nd.Children)
						if nd.Parent >= 0 {
							links++
						}
						want.Msgs += links * algo.Segments(H, seg, 8)
						want.Bytes += links * H
					}
					if n == 1 {
						want = algotest.Count{}
					}
					if st.Sent[r] != want || st.Recv[r] != want {
						t.Errorf("allreduce seg=%d n=%d count=%d rank %d: sent %+v received %+v, want %+v", seg, n, count, r, st.Sent[r], st.Recv[r], want)
					}
				}
			}
		}
	}
}

func BenchmarkAllReduce1MiB4(b *testing.B) {
	const size = 1 << 20
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	b.SetBytes(size)
	for b.Loop() {
		err := algotest.Run(4, 8, algotest.SumFloat64, func(ctx context.Context, p algo.Peers) error {
			return tree.AllReduce(ctx, p, bufs[p.Rank()])
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleBroadcast() {
	out := make([][]int64, 5)
	err := algotest.Run(5, 8, nil, func(ctx context.Context, p algo.Peers) error {
		buf := algotest.Int64Bytes([]int64{int64(p.Rank()), 7})
		if err := tree.Broadcast(ctx, p, buf, 3); err != nil {
			return err
		}
		out[p.Rank()] = algotest.Int64s(buf)
		return nil
	})
	fmt.Println(out, err)
	// Output: [[3 7] [3 7] [3 7] [3 7] [3 7]] <nil>
}
