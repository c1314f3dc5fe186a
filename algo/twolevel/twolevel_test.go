package twolevel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
	"github.com/goccl/goccl/algo/twolevel"
)

// hosted is algotest's Peers on a machine of L ranks a host.
type hosted struct {
	algo.Peers
	t algo.Topology
}

func (h hosted) Topology() algo.Topology { return h.t }

// machines are the constants the conformance suites run under, so that
// every phase runs each of its families somewhere (TestPlansCovered):
// the default (algo.DefaultTopology), the same with 5 µs between hosts
// (Rabenseifner's halving across them at 32 KiB), bandwidth alone (α = 0:
// the rings) and latency alone (β = γ = 0: halving, doubling, the tree).
var machines = []struct {
	name string
	t    func(l int) algo.Topology
}{
	{"default", algo.DefaultTopology},
	{"5us", func(l int) algo.Topology {
		t := algo.DefaultTopology(l)
		t.Inter.Alpha = 5e-6
		return t
	}},
	{"bandwidth", func(l int) algo.Topology {
		t := algo.DefaultTopology(l)
		t.Intra.Alpha, t.Inter.Alpha = 0, 0
		return t
	}},
	{"latency", func(l int) algo.Topology {
		t := algo.DefaultTopology(l)
		t.Intra.Beta, t.Inter.Beta, t.Gamma = 0, 0, 0
		return t
	}},
}

// layouts are the ranks a host the suites run with over world sizes 1..9:
// with 1 (every rank alone: one level), 2 (2x2, 3x2, 4x2 and uneven
// hosts at odd sizes: one level), 3 (3x3) and 4 (2x4, 1x4: one host).
var layouts = []int{1, 2, 3, 4}

// onHosts runs each suite under every machine and layout.
func onHosts[F any](t *testing.T, suite func(*testing.T, F), wrap func(func(algo.Peers) algo.Peers) F) {
	for _, m := range machines {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%d_a_host", m.name, l), func(t *testing.T) {
				tp := m.t(l)
				suite(t, wrap(func(p algo.Peers) algo.Peers { return hosted{p, tp} }))
			})
		}
	}
}

func TestAllReduce(t *testing.T) {
	onHosts(t, algotest.TestAllReduce, func(h func(algo.Peers) algo.Peers) algo.AllReduceFunc {
		return func(ctx context.Context, p algo.Peers, buf []byte) error { return twolevel.AllReduce(ctx, h(p), buf) }
	})
}

func TestReduceScatter(t *testing.T) {
	onHosts(t, algotest.TestReduceScatter, func(h func(algo.Peers) algo.Peers) algo.ReduceScatterFunc {
		return func(ctx context.Context, p algo.Peers, buf []byte, c []int) error {
			return twolevel.ReduceScatter(ctx, h(p), buf, c)
		}
	})
}

func TestAllGather(t *testing.T) {
	onHosts(t, algotest.TestAllGather, func(h func(algo.Peers) algo.Peers) algo.AllGatherFunc {
		return func(ctx context.Context, p algo.Peers, buf []byte, c []int) error {
			return twolevel.AllGather(ctx, h(p), buf, c)
		}
	})
}

func TestBroadcast(t *testing.T) {
	onHosts(t, algotest.TestBroadcast, func(h func(algo.Peers) algo.Peers) algo.BroadcastFunc {
		return func(ctx context.Context, p algo.Peers, buf []byte, root int) error {
			return twolevel.Broadcast(ctx, h(p), buf, root)
		}
	})
}

func TestReduce(t *testing.T) {
	onHosts(t, algotest.TestReduce, func(h func(algo.Peers) algo.Peers) algo.ReduceFunc {
		return func(ctx context.Context, p algo.Peers, buf []byte, root int) error {
			return twolevel.Reduce(ctx, h(p), buf, root)
		}
	})
}

// TestPlainPeers: Peers that do not know their hosts run one level.
func TestPlainPeers(t *testing.T) {
	algotest.TestAllReduce(t, twolevel.AllReduce)
	algotest.TestAllGather(t, twolevel.AllGather)
}

// TestPlansCovered: over the suites' machines, layouts, world sizes and
// counts, every phase of every collective runs each family it may run,
// so the suites above run every path.
func TestPlansCovered(t *testing.T) {
	want := map[algo.Collective][3][]algo.Algorithm{
		algo.AllReduce:     {{algo.Ring, algo.Halving}, {algo.Ring, algo.Halving, algo.Doubling}, {algo.Ring, algo.Doubling}},
		algo.ReduceScatter: {{algo.Ring, algo.Halving}, {algo.Ring, algo.Halving}, nil},
		algo.AllGather:     {nil, {algo.Ring, algo.Doubling}, {algo.Ring, algo.Doubling}},
		algo.Broadcast:     {nil, {algo.Ring, algo.Tree}, {algo.Ring, algo.Tree}},
		algo.Reduce:        {{algo.Tree}, {algo.Tree}, nil},
	}
	seen := map[string]bool{}
	for _, m := range machines {
		for _, l := range layouts {
			for _, n := range algotest.WorldSizes {
				for _, count := range algotest.Counts(n) {
					for c := range want {
						p := algo.PlanTwoLevel(c, 8*count, n, m.t(l))
						for i, a := range []algo.Algorithm{p.Before, p.Across, p.After} {
							seen[fmt.Sprint(c, i, a)] = true
						}
					}
				}
			}
		}
	}
	for c, phases := range want {
		for i, as := range phases {
			for _, a := range as {
				if !seen[fmt.Sprint(c, i, a)] {
					t.Errorf("%s: phase %d never runs %s", c, i, a)
				}
			}
		}
	}
}
