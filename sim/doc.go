// Package sim runs goccl's collective algorithms, unmodified, on a
// simulated cluster: every rank is a goroutine with an [algo.Peers] whose
// sends, receives and reductions take virtual time, and a discrete-event
// scheduler moves the clock.
//
// # The machine
//
// A message of m bytes from rank a to rank b costs α + m·β of its links;
// reducing m bytes costs the rank m·γ. A [Topology] places the ranks on
// hosts (each rank has its own port within a host, at the Intra level),
// connects the hosts through their NICs (the Inter level) and, optionally,
// through the leaf switches of a two-level fat tree with oversubscribed
// uplinks. Every link's bandwidth, in each direction, is shared equally
// by the messages crossing it at once, and a message moves at the pace of
// its most crowded link; the messages of one pair of ranks go one after
// the other, as over one connection. A message has been sent when its last
// byte has left and arrives α later. Receives match sends in FIFO order
// per pair of ranks, as [algo.Peers] requires: a receive completes when
// its message has arrived and it has been posted. [Flat] is the plain alpha-beta
// model of package algo's cost formulas: every rank alone on a host.
//
// # The scheduler
//
// A rank runs until it waits: in Request.Wait on a request that has not
// finished, or in Reduce. Isend and Irecv only note the operation. When
// the last rank waits, it becomes the scheduler: it takes the noted
// operations of the ranks that ran, in rank order (so the order in which
// the Go runtime ran them does not matter), queues their messages on the
// links, then moves the clock to the earliest pending event, applies every
// event of that instant in the order they were made, and wakes the ranks
// whose waits ended. The same run therefore gives the same events at the
// same times every time (TestDeterministic), and the algorithms cannot
// tell the simulator from a transport.
//
// # Data or sizes
//
// With Config.SizeOnly no byte moves: the buffers are one shared range of
// reserved address space (PROT_NONE on Unix, so an algorithm that touched
// bytes itself would fault), sends carry lengths and reductions are
// charged, not computed. 1,024 ranks allreducing 1 GiB with the ring (5.2
// million messages) take about 4 s of wall time; 16,384 ranks with
// Rabenseifner's halving about 4 s. Without SizeOnly the ranks move real
// bytes and [RunCollective] checks every result against a sequential
// reference.
//
// # What it answers
//
// [RunCollective] returns the virtual time of one collective, [Transcript]
// prints its messages step by step as the algorithms' doc comments draw
// them, and [WriteTrace] writes a Chrome trace with a row per rank. The
// tests compare every algorithm with its formula in algo.Cost and
// algo.Select's choices with the simulated best (costmodel_test.go says
// where and why they differ). The goccl command's "sim" subcommand runs
// sweeps and prints the bench table.
package sim
