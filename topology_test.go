package goccl

import (
	"sync"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/reduceop"
)

func TestHostBlocks(t *testing.T) {
	for _, tc := range []struct {
		perHost int
		world   []int
		want    int
	}{
		{0, []int{0, 1, 2, 3}, 1},
		{1, []int{0, 1, 2, 3}, 1},
		{4, []int{0, 1, 2, 3, 4, 5, 6, 7}, 4},
		{4, []int{0, 1, 2, 3}, 4},                // one host
		{4, []int{0, 2, 4, 6}, 2},                // even ranks: 2 a host
		{4, []int{1, 2, 5, 6, 9, 10}, 2},         // the middle of each host
		{4, []int{0, 1, 2, 4, 5, 6}, 3},          // 3 of each
		{4, []int{0, 1, 2, 4, 5}, 1},             // 3 then 2
		{4, []int{0, 4, 1, 5}, 1},                // hosts alternate
		{4, []int{0, 1, 4, 5, 2, 3}, 1},          // host 0 in two runs
		{4, []int{4, 5, 6, 7, 0, 1, 2, 3}, 4},    // hosts in another order
		{8, []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, 1}, // 8 then 1
	} {
		if got := hostBlocks(tc.perHost, tc.world); got != tc.want {
			t.Errorf("hostBlocks(%d, %v) = %d, want %d", tc.perHost, tc.world, got, tc.want)
		}
	}
}

// TestInitHostBlocks: Init agrees on the hosts' blocks of ranks, a group
// works out its own, and the algorithm choice uses them: on 2 hosts of 4
// ranks a 512 KiB allreduce takes the ring where the host-blind model
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
		{"blocks", func(r int) string { return string(rune('a' + r/4)) }, 4, algo.Ring},
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
