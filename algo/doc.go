// Package algo implements the contract between goccl's collective
// algorithms and the layers that run them, plus the algorithms too small to
// deserve a package of their own.
//
// An algorithm is a plain function of an [algo.Peers] value and its buffers
// (see the *Func types in collective.go). It does no I/O of its own, starts
// no goroutines and keeps no state between calls; the same code runs over
// every transport and over the in-process harness in package algo/algotest.
// The families live in sub-packages:
//
//	algo/ring     ring allreduce (reduce-scatter + allgather), reduce-scatter,
//	              allgather, pipelined chain broadcast
//	algo/tree     binomial broadcast, reduce, gather, scatter; double binary
//	              tree allreduce
//	algo/halving  recursive doubling and Rabenseifner allreduce, recursive
//	              halving reduce-scatter, recursive doubling allgather
//	algo/twolevel within the hosts, across them, within them again:
//	              allreduce, reduce-scatter, allgather, broadcast, reduce,
//	              each phase one of the families above on a sub-group
//
// Package algo itself holds the pairwise all-to-all ([PairwiseAllToAll]),
// the dissemination barrier ([DisseminationBarrier]), a few helpers shared by
// the algorithms ([Exchange], [WaitAll], [EvenCounts], [Offsets]), and the
// alpha-beta cost model ([Cost], [Select], [SelectEnv]) that picks an
// algorithm for a collective, message size and group size, on one level
// or, with [Topology], on ranks grouped on hosts ([CostTopo],
// [SelectTopo], and the two-level collectives' [PlanTwoLevel]). Peers
// that know their hosts say so through [Hosts]; a [Subgroup] is some
// ranks of a group seen as a group of their own.
//
// # Rules every algorithm follows
//
//   - Messages between a pair of ranks are matched in FIFO order, so each
//     rank posts its receives from a peer in the order that peer posts its
//     sends to it. There are no tags.
//   - A full-duplex exchange is Irecv, then Isend, then wait for both.
//   - A message whose length both sides compute as zero is not sent at all
//     (the barrier is the exception: its messages are empty by design).
//     No algorithm sends to its own rank.
//   - Every rank of an allreduce ends with bit-identical bytes: each element
//     of the result is computed by exactly one rank and copied to the others,
//     or computed by partners in the same operand order.
//   - After an error the contents of the buffers are unspecified, and
//     requests that were started may still be pending: the caller aborts the
//     communicator. Scratch buffers that may still be targeted by a pending
//     receive are never recycled.
package algo
