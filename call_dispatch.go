package goccl

import (
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/halving"
	"github.com/goccl/goccl/algo/ring"
	"github.com/goccl/goccl/algo/tree"
	"github.com/goccl/goccl/algo/twolevel"
)

// The algorithm tables: for each collective, the implementation of every
// family that has one. algo.Implements and these tables must agree (a test
// checks).
var (
	allReduceAlgos = map[algo.Algorithm]algo.AllReduceFunc{
		algo.Ring:     ring.AllReduce,
		algo.Tree:     tree.AllReduce,
		algo.Halving:  halving.AllReduce,
		algo.Doubling: halving.DoublingAllReduce,
		algo.TwoLevel: twolevel.AllReduce,
	}
	broadcastAlgos = map[algo.Algorithm]algo.BroadcastFunc{
		algo.Ring:     ring.Broadcast,
		algo.Tree:     tree.Broadcast,
		algo.TwoLevel: twolevel.Broadcast,
	}
	reduceAlgos    = map[algo.Algorithm]algo.ReduceFunc{algo.Tree: tree.Reduce, algo.TwoLevel: twolevel.Reduce}
	allGatherAlgos = map[algo.Algorithm]algo.AllGatherFunc{
		algo.Ring:     ring.AllGather,
		algo.Doubling: halving.AllGather,
		algo.TwoLevel: twolevel.AllGather,
	}
	reduceScatterAlgos = map[algo.Algorithm]algo.ReduceScatterFunc{
		algo.Ring:     ring.ReduceScatter,
		algo.Halving:  halving.ReduceScatter,
		algo.TwoLevel: twolevel.ReduceScatter,
	}
	gatherAlgos   = map[algo.Algorithm]algo.GatherFunc{algo.Tree: tree.Gather}
	scatterAlgos  = map[algo.Algorithm]algo.ScatterFunc{algo.Tree: tree.Scatter}
	allToAllAlgos = map[algo.Algorithm]algo.AllToAllFunc{algo.Pairwise: algo.PairwiseAllToAll}
	barrierFunc   = algo.DisseminationBarrier
)

// choose returns the forced algorithm if it implements coll, else the cost
// model's pick. A loop of latency-bound calls asks the same question each
// time, so the last answer for each collective is kept (c.picks): the
// model weighs every family, a twentieth of the user time of an 8-byte
// allreduce over TCP.
func (c *Comm) choose(coll algo.Collective, bytes int, force algo.Algorithm) algo.Algorithm {
	if force != "" && algo.Implements(force, coll) {
		return force
	}
	if int(coll) >= len(c.picks) {
		return algo.SelectFromTopo(coll, bytes, c.Size(), c.opts.algos, c.topology())
	}
	gen := c.algosGen.Load()
	if p := c.picks[coll].Load(); p != nil && p.bytes == bytes && p.perHost == c.perHost && p.gen == gen {
		return p.algo
	}
	a := algo.SelectFromTopo(coll, bytes, c.Size(), c.opts.algos, c.topology())
	c.picks[coll].Store(&cachedPick{bytes: bytes, perHost: c.perHost, gen: gen, algo: a})
	return a
}

// cachedPick is the cost model's answer for a call of bytes, asked with
// perHost ranks a host and the algorithms allowed after gen SetAlgorithm
// calls.
type cachedPick struct {
	bytes, perHost int
	gen            uint64
	algo           algo.Algorithm
}

// AlgorithmFor returns the algorithm a collective of bytes per rank on
// host memory runs with on c as it stands: the one WithAlgorithm,
// GOCCL_ALGO or SetAlgorithm forces, else the cost model's pick, or
// "board" where the call runs on the shared board (call_board.go), or
// the backend's name ("mpi") where a backend runs it. Every rank
// gets the same answer. goccl bench labels its rows with it.
func (c *Comm) AlgorithmFor(coll algo.Collective, bytes int) algo.Algorithm {
	if c.BackendFor(coll, bytes) != "goccl" { // the backend chooses (BackendFor): its name, as the comms log has it
		return algo.Algorithm(c.be.Name())
	}
	if (coll == algo.AllReduce || coll == algo.Barrier) && c.useBoard(bytes, true) {
		return algoBoard
	}
	if coll == algo.Barrier {
		return algo.Dissemination
	}
	return c.choose(coll, bytes, "")
}

func pick[F any](c *Comm, coll algo.Collective, bytes int, force algo.Algorithm, table map[algo.Algorithm]F) (algo.Algorithm, F) {
	a := c.choose(coll, bytes, force)
	f, ok := table[a]
	if !ok {
		// The cost model named a family this table lacks: take the first
		// implementation in a fixed order, the same on every rank (a test
		// keeps this unreachable).
		for _, k := range algo.Algorithms {
			if g, ok := table[k]; ok {
				return k, g
			}
		}
	}
	return a, f
}

func (c *Comm) pickAllReduce(bytes int, force algo.Algorithm) (algo.Algorithm, algo.AllReduceFunc) {
	return pick(c, algo.AllReduce, bytes, force, allReduceAlgos)
}
