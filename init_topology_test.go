package goccl

import (
	"sync"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/reduceop"
)

// TestInitHostBlocks: Init agrees on the hosts' blocks of ranks, a group
// works out its own, and the algorithm choice uses them: on 2 hosts of 4
// ranks a 512 KiB allreduce takes the two-level one (algo/twolevel, run
// here through the communicator's algo.Hosts) where the host-blind model
// takes Rabenseifner's halving (whose first round sends half the buffer
// from every rank of a host through its NIC at once). A forced algorithm
// still wins, and hosts that are not blocks, or one host, leave the choice
// host-blind.
func TestInitHostBlocks(t *testing.T) {
	const size, bytes = 8, 512 << 10
	if blind := algo.Select(algo.AllReduce, bytes, size); blind != algo.Halving {
		t.Fatalf("host-blind Select takes %s for the test's allreduce, not halving: pick another size", blind)
	}
	for _, tc := range []struct {
		name    string
		host    func(r int) string
		perHost int
		want    algo.Algorithm
	}{
		{"blocks", func(r int) string { return string(rune('a' + r/4)) }, 4, algo.TwoLevel},
		{"interleaved", func(r int) string { return string(rune('a' + r%2)) }, 1, algo.Halving},
		{"one host", func(r int) string { return "a" }, size, algo.Halving},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pretendHosts(t, tc.host)
			comms, err := initRanks(t, size, "auto")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, size)
			evens := make([]*Comm, size)
			for r, c := range comms {
				if c.perHost != tc.perHost {
					t.Errorf("rank %d: %d ranks a host, want %d", r, c.perHost, tc.perHost)
				}
				if got := c.choose(algo.AllReduce, bytes, ""); got != tc.want {
					t.Errorf("rank %d: allreduce of %d B takes %s, want %s", r, bytes, got, tc.want)
				}
				if got := c.choose(algo.AllReduce, bytes, algo.Tree); got != algo.Tree {
					t.Errorf("rank %d: a forced tree gives %s", r, got)
				}
				wg.Go(func() {
					// Every rank must pick the same algorithm: a mix
					// would hang until the timeout or mix up the data.
					buf := make([]float32, bytes/4)
					for i := range buf {
						buf[i] = float32(r + i%7)
					}
					if errs[r] = c.AllReduce(t.Context(), buf, reduceop.Sum); errs[r] != nil {
						return
					}
					for i, v := range buf {
						if want := float32(size*(size-1)/2 + size*(i%7)); v != want {
							t.Errorf("rank %d: element %d is %g, want %g", r, i, v, want)
							return
						}
					}
					evens[r], errs[r] = c.Split(t.Context(), r%2, r)
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			for r, g := range evens {
				if want := max(1, tc.perHost/2); g.perHost != want {
					t.Errorf("rank %d: its half has %d ranks a host, want %d", r, g.perHost, want)
				}
			}
		})
	}
}

// The cost model's answer is kept per collective (choose), and neither
// SetAlgorithm nor the host layout Init learns after the communicator
// exists may find a stale one.
func TestChooseCacheFollowsChanges(t *testing.T) {
	comms, err := NewLocal(4)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	c := comms[0]
	const bytes = 32 << 10 // where 2 ranks a host change the model's answer
	model := c.AlgorithmFor(algo.AllReduce, bytes)
	if again := c.AlgorithmFor(algo.AllReduce, bytes); again != model {
		t.Fatalf("asked twice: %q then %q", model, again)
	}
	forced := algo.Tree
	if model == forced {
		forced = algo.Ring
	}
	if err := c.SetAlgorithm(forced); err != nil {
		t.Fatal(err)
	}
	if got := c.AlgorithmFor(algo.AllReduce, bytes); got != forced {
		t.Errorf("after SetAlgorithm(%q): %q", forced, got)
	}
	if err := c.SetAlgorithm(""); err != nil {
		t.Fatal(err)
	}
	if got := c.AlgorithmFor(algo.AllReduce, bytes); got != model {
		t.Errorf("after SetAlgorithm(\"\"): %q, want the model's %q", got, model)
	}
	// Two ranks a host make another topology; the answer must be the
	// model's for it, not the one kept for one rank a host.
	want := algo.SelectFromTopo(algo.AllReduce, bytes, c.Size(), nil, algo.DefaultTopology(2))
	if want == model {
		t.Fatalf("the model picks %q for both layouts: the test needs a size where they differ", want)
	}
	c.perHost = 2
	if got := c.AlgorithmFor(algo.AllReduce, bytes); got != want {
		t.Errorf("with 2 ranks a host: %q, want %q", got, want)
	}
}
