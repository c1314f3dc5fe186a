// Package tree implements the tree algorithms: binomial broadcast, reduce,
// gather and scatter from any root, and a double-binary-tree allreduce.
//
// A binomial tree reaches n ranks in ⌈log2 n⌉ rounds: in each round every
// rank that already has the data passes it to one more, so the latency term
// is ⌈log2 n⌉·α, against (n-1)·α for a ring. Ranks are renumbered relative
// to the root (v = rank - root mod n), so one tree serves every root.
//
// The allreduce uses two binary trees, as NCCL does: the buffer is split in
// two halves, each reduced up one tree and broadcast back down it, in
// segments so that the two trees and the segments pipeline. The second tree
// is the first mirrored (even n) or shifted by one rank (odd n), so most
// ranks that are leaves in one tree are inner nodes in the other, and no
// rank carries the load of two inner positions.
//
// Every function here has the shape of the matching algo.*Func type.
package tree
