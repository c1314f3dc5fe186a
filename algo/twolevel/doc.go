// Package twolevel implements the two-level collectives: within each
// host, then across hosts, then within each host again, as NCCL's rings
// and trees over NVLink then the network, Open MPI's HAN and Horovod's
// hierarchical allreduce do.
//
// The n ranks sit on H hosts of L in aligned blocks (rank r on host
// ⌊r/L⌋, local index r mod L), as the Peers say through algo.Hosts. Each
// phase runs an unchanged one-level algorithm of package ring, tree or
// halving on a sub-group (algo.Strided): the L ranks of one host, or the
// H ranks of one local index, one a host. A phase within the hosts runs
// on every host at once over the hosts' own links; a phase across hosts
// runs on every local index at once (allreduce, reduce-scatter,
// allgather: each rank on its own share of the buffer, 1/L of it), or on
// the root's local index alone (broadcast, reduce). No two sub-groups
// that run at once share a pair of ranks, so the Peers' FIFO order per
// pair keeps their messages apart without tags.
//
// Which one-level family each phase runs is algo.PlanTwoLevel's choice,
// made with the costs of the machine the Peers report (algo.Hosts), so
// the algorithm runs the plan that the cost model priced when it chose
// it (algo.CostTopo). Every rank computes the same plan from the same
// sizes.
//
// Where the plan is refused (Peers that do not know their hosts, one rank
// a host, one host, or hosts of unequal sizes) every function here runs
// the one-level algorithm that algo.SelectTopo picks for the machine
// instead, so forcing the family (GOCCL_ALGO=twolevel) never gives a
// wrong result; the cost model never picks it there (algo.CostTopo is
// +Inf).
//
// Every function here has the shape of the matching algo.*Func type.
package twolevel
