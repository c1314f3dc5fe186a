// Package algotest implements an in-process [algo.Peers] harness for tests,
// benchmarks and simulation of goccl's algorithms.
//
// [Run] starts one goroutine per rank, connected by unbounded FIFO queues
// (one per ordered pair of ranks), and calls the same function on each. It
// does not use any transport: it exists so that the algorithms in algo/...
// can be tested on their own. Isend copies its payload and completes at
// once; Irecv matches messages from a peer in the order it was posted.
//
// [World.Run] also counts messages and bytes sent and received per rank and,
// when asked, records a transcript ("step 1: rank 0 -> rank 1: 16 bytes")
// whose step numbers are logical clocks: a message sent by a rank is stamped
// one more than the largest stamp the rank has seen complete (its own sends
// and the messages it received). The transcript is therefore deterministic
// and fit for golden files.
//
// A rank that fails cancels the others, and a run in which every unfinished
// rank waits for a message that nobody can send any more fails at once with
// [ErrDeadlock] instead of hanging.
//
// The package also has the small helpers those tests share: reducers for
// int64 and float64 sums, conversions between []int64 / []float64 and bytes,
// and [Guarded] buffers with guard bands.
package algotest
