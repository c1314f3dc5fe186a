package goccl

import (
	"github.com/goccl/goccl/algo"
)

// The hosts behind the algorithm choice.
//
// The cost model that picks an algorithm (algo.SelectFromTopo) needs to
// know how the ranks sit on hosts: within a host messages go through
// shared memory, between hosts every rank of a host shares its NIC, and
// an algorithm that pairs ranks far apart first (Rabenseifner's halving)
// is then up to 8x slower than the ring on 8 ranks a host. The model
// describes hosts that hold equal, contiguous blocks of ranks (ranks
// 0..L-1 on one host, L..2L-1 on the next, as launchers number them);
// any other layout is modelled as one rank a host, the host-blind choice.
//
// Init learns the layout once: each rank knows its host's ranks, and
// internal/rendezvous makes every rank agree on L through the store (all
// ranks must pick the same algorithm). A group made from the world works
// out its own blocks from the world's at creation (rendezvous.GroupBlocks). The
// per-call path only reads the result.

// topology is the machine c's algorithm choice assumes: algo's default
// constants, c.perHost ranks a host. A group on one host keeps the
// host-blind choice it had before hosts were modelled (algo's one level
// under DefaultCostParams): shared memory's default constants have the
// same α/β ratio, and nothing measured says how reductions compare there.
func (c *Comm) topology() algo.Topology {
	if c.perHost >= c.Size() {
		return algo.DefaultTopology(1)
	}
	return algo.DefaultTopology(c.perHost)
}
