package sim

import (
	"context"
	"os"
	"testing"

	"github.com/goccl/goccl/algo"
)

// TestScale runs the scale points (with GOCCL_SIM_FULL=1) and
// logs their wall-clock time: 1,024 ranks on 128 hosts allreducing 1 GiB
// with the ring, and 16,384 ranks on 2,048 hosts with halving and (at
// 64 MiB: at 1 GiB it sends about 2.7e8 messages) the tree. The virtual
// time of the ring must be the bandwidth bound of its inter-host links,
// 2(n-1)/n·N·β, within 1% (one hop per host boundary, no contention);
// the others must at least reach it.
func TestScale(t *testing.T) {
	if os.Getenv("GOCCL_SIM_FULL") == "" {
		t.Skip("set GOCCL_SIM_FULL=1 for the scale runs (about a minute)")
	}
	for _, pt := range []struct {
		n, hosts int
		a        algo.Algorithm
		size     int
	}{
		{1024, 128, algo.Ring, 1 << 30},
		{16384, 2048, algo.Halving, 1 << 30},
		{16384, 2048, algo.Tree, 64 << 20},
	} {
		cfg := Config{Ranks: pt.n, Topology: DefaultTopology(pt.hosts), Gamma: DefaultGamma, SizeOnly: true}
		res, err := RunCollective(context.Background(), cfg, algo.AllReduce, pt.a, pt.size)
		if err != nil {
			t.Fatal(err)
		}
		bound := 2 * float64(pt.n-1) / float64(pt.n) * float64(pt.size) * DefaultInterBeta
		t.Logf("%s allreduce, %d ranks on %d hosts, %d B: virtual %.3f ms (bandwidth bound %.3f ms), %d messages, wall %.1f s",
			pt.a, pt.n, pt.hosts, pt.size, res.Time*1e3, bound*1e3, res.Msgs, res.Elapsed)
		if res.Time < bound*0.999 || (pt.a == algo.Ring && res.Time > bound*1.01) {
			t.Errorf("%s: virtual time %.3f ms against the bound %.3f ms", pt.a, res.Time*1e3, bound*1e3)
		}
	}
}
