// Package ring implements the ring algorithms: allreduce as a reduce-scatter
// followed by an allgather, reduce-scatter, allgather, and a pipelined chain
// broadcast.
//
// The n ranks form a ring in which rank r sends only to its right neighbour
// r+1 and receives only from its left neighbour r-1 (mod n). Each step is a
// full-duplex exchange: every rank sends one block while it receives
// another, so every link carries data in every step and the bandwidth term
// of the cost is the best possible, (n-1)/n of the buffer per phase. The
// price is latency: n-1 steps per phase. The cost model in package algo
// therefore picks the ring for large messages.
//
// The buffer is cut into n blocks on element boundaries (sizes differ by at
// most one element; see [algo.EvenCounts]), and each block into segments of
// at most [Options.SegmentBytes] so that reducing segment k overlaps the
// transfer of segment k+1. Empty blocks and segments are not sent.
//
// Every function here has the shape of the matching algo.*Func type; the
// package-level functions use the zero [Options].
package ring

// Options tunes the ring algorithms. The zero value is ready to use.
type Options struct {
	// SegmentBytes is the largest message, rounded down to whole elements,
	// that reduce-scatter (and so allreduce) and broadcast send at once.
	// Zero means the Peers' own (algo.Segmenter) or else
	// algo.DefaultSegmentBytes (256 KiB).
	SegmentBytes int
}

func mod(a, n int) int { return ((a % n) + n) % n }
