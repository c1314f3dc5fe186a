package twolevel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
	"github.com/goccl/goccl/algo/twolevel"
)

// The doc comments' byte counts held to the sends: per rank, the bytes
// it sends (or receives) within its host and to other hosts, from the
// recorded transcript, against the formula for the plan's families.

// hostBytes runs fn on H hosts of L ranks under machine tp and returns,
// per rank, the bytes sent within the host and to other hosts, and the
// same received.
func hostBytes(t *testing.T, H, L int, tp algo.Topology, fn func(ctx context.Context, p algo.Peers) error) (sentIn, sentX, recvIn, recvX []int) {
	t.Helper()
	n := H * L
	st, err := algotest.World{Size: n, ElemSize: 8, Reduce: algotest.SumInt64, Record: true}.Run(context.Background(),
		func(ctx context.Context, p algo.Peers) error { return fn(ctx, hosted{p, tp}) })
	if err != nil {
		t.Fatal(err)
	}
	sentIn, sentX, recvIn, recvX = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	for _, e := range st.Transcript {
		if e.From/L == e.To/L {
			sentIn[e.From] += e.Bytes
			recvIn[e.To] += e.Bytes
		} else {
			sentX[e.From] += e.Bytes
			recvX[e.To] += e.Bytes
		}
	}
	return
}

// shapes are the hosts the counts are checked on, H x L.
var shapes = [][2]int{{2, 2}, {2, 4}, {4, 2}, {4, 4}, {8, 2}}

// across is what a rank sends to other hosts in an allreduce across H
// hosts of share bytes with family a.
func across(a algo.Algorithm, H, share int) int {
	if a == algo.Doubling {
		return algo.Log2(H) * share
	}
	return 2 * (H - 1) * share / H
}

func each(t *testing.T, do func(t *testing.T, H, L int, tp algo.Topology, N int)) {
	for _, m := range machines {
		for _, s := range shapes {
			H, L := s[0], s[1]
			n := H * L
			for _, k := range []int{1, 3, 512} { // elements a rank's block
				t.Run(fmt.Sprintf("%s/%dx%d/%d", m.name, H, L, k), func(t *testing.T) { do(t, H, L, m.t(L), 8*k*n) })
			}
		}
	}
}

func TestAllReduceBytes(t *testing.T) {
	each(t, func(t *testing.T, H, L int, tp algo.Topology, N int) {
		plan := algo.PlanTwoLevel(algo.AllReduce, N, H*L, tp)
		sIn, sX, _, _ := hostBytes(t, H, L, tp, func(ctx context.Context, p algo.Peers) error {
			return twolevel.AllReduce(ctx, p, make([]byte, N))
		})
		for r := range sIn {
			if w := 2 * (L - 1) * N / L; sIn[r] != w {
				t.Errorf("%+v rank %d: %d bytes within its host, want 2(L-1)/L·N = %d", plan, r, sIn[r], w)
			}
			if w := across(plan.Across, H, N/L); sX[r] != w {
				t.Errorf("%+v rank %d: %d bytes to other hosts, want %d", plan, r, sX[r], w)
			}
		}
	})
}

func TestReduceScatterBytes(t *testing.T) {
	each(t, func(t *testing.T, H, L int, tp algo.Topology, N int) {
		n := H * L
		sIn, sX, _, _ := hostBytes(t, H, L, tp, func(ctx context.Context, p algo.Peers) error {
			return twolevel.ReduceScatter(ctx, p, make([]byte, N), algo.EvenCounts(N/8, n))
		})
		for r := range sIn {
			if w := (L - 1) * N / L; sIn[r] != w {
				t.Errorf("rank %d: %d bytes within its host, want (L-1)/L·N = %d", r, sIn[r], w)
			}
			if w := (H - 1) * N / L / H; sX[r] != w {
				t.Errorf("rank %d: %d bytes to other hosts, want (H-1)/H·N/L = %d", r, sX[r], w)
			}
		}
	})
}

func TestAllGatherBytes(t *testing.T) {
	each(t, func(t *testing.T, H, L int, tp algo.Topology, N int) {
		n := H * L
		sIn, sX, _, _ := hostBytes(t, H, L, tp, func(ctx context.Context, p algo.Peers) error {
			return twolevel.AllGather(ctx, p, make([]byte, N), algo.EvenCounts(N/8, n))
		})
		for r := range sIn {
			if w := (L - 1) * N / L; sIn[r] != w {
				t.Errorf("rank %d: %d bytes within its host, want (L-1)/L·N = %d", r, sIn[r], w)
			}
			if w := (H - 1) * N / L / H; sX[r] != w {
				t.Errorf("rank %d: %d bytes to other hosts, want (H-1)/H·N/L = %d", r, sX[r], w)
			}
		}
	})
}

func TestBroadcastBytes(t *testing.T) {
	each(t, func(t *testing.T, H, L int, tp algo.Topology, N int) {
		for _, root := range []int{0, H*L - 1, L + 1} {
			_, _, rIn, rX := hostBytes(t, H, L, tp, func(ctx context.Context, p algo.Peers) error {
				return twolevel.Broadcast(ctx, p, make([]byte, N), root)
			})
			for r := range rIn {
				wIn, wX := N, 0
				if r%L == root%L {
					wIn = 0
					if r/L != root/L {
						wX = N
					}
				}
				if rIn[r] != wIn || rX[r] != wX {
					t.Errorf("root %d rank %d: received %d bytes within its host and %d from others, want %d and %d", root, r, rIn[r], rX[r], wIn, wX)
				}
			}
		}
	})
}

func TestReduceBytes(t *testing.T) {
	each(t, func(t *testing.T, H, L int, tp algo.Topology, N int) {
		for _, root := range []int{0, H*L - 1, L + 1} {
			sIn, sX, _, _ := hostBytes(t, H, L, tp, func(ctx context.Context, p algo.Peers) error {
				return twolevel.Reduce(ctx, p, make([]byte, N), root)
			})
			for r := range sIn {
				wIn, wX := N, 0
				if r%L == root%L {
					wIn = 0
					if r/L != root/L {
						wX = N
					}
				}
				if sIn[r] != wIn || sX[r] != wX {
					t.Errorf("root %d rank %d: sent %d bytes within its host and %d to others, want %d and %d", root, r, sIn[r], sX[r], wIn, wX)
				}
			}
		}
	})
}
