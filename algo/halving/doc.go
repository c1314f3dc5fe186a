// Package halving implements the recursive halving and doubling
// algorithms: recursive-doubling allreduce for small messages, Rabenseifner
// allreduce (recursive-halving reduce-scatter followed by recursive-doubling
// allgather) for large ones, recursive-halving reduce-scatter and
// recursive-doubling allgather.
//
// In round k of a recursive-doubling or -halving algorithm each rank talks
// to the partner whose rank differs from its own in bit k, so log2(n)
// rounds connect everyone; the latency term is log2(n)·α instead of the
// ring's (n-1)·α.
//
// These algorithms need a power-of-two group. For any other size n, with
// p the largest power of two below n and rem = n-p, they use the standard
// fold-in: among the first 2·rem ranks each even rank r hands its data to
// its odd partner r+1 and sits the middle phase out; the p remaining ranks
// (the odd ones of the first 2·rem, then all ranks from 2·rem on) run the
// power-of-two algorithm, renumbered 0..p-1; at the end each odd partner
// gives its even rank the part of the result that rank needs. Five ranks:
//
//	        fold-in      power-of-two phase         fold-out
//	rank 0  --data-> 1                               <-result-- 1
//	rank 1               new rank 0
//	rank 2               new rank 1
//	rank 3               new rank 2
//	rank 4               new rank 3
//
// The fold-in costs α + N·β (plus N·γ for reductions) before and α + N·β
// after; see each file for the totals.
//
// Every element of an allreduce result is either computed by one rank and
// copied to the others, or (recursive doubling) computed by both partners
// with the lower-numbered partner's operand on the left, so all ranks end
// with bit-identical bytes.
package halving
