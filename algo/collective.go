package algo

import "context"

// Collective identifies a collective operation, for Select and the cost model.
type Collective uint8

// The collectives that algorithms implement.
const (
	AllReduce Collective = iota + 1
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	AllToAll
	Gather
	Scatter
	Barrier
)

// Algorithm names an algorithm family; GOCCL_ALGO and options use these names.
type Algorithm string

// The algorithm families. Not every family implements every collective:
// Implements says which do.
const (
	Ring          Algorithm = "ring"          // algo/ring
	Tree          Algorithm = "tree"          // algo/tree
	Halving       Algorithm = "halving"       // algo/halving: Rabenseifner / recursive halving
	Doubling      Algorithm = "doubling"      // algo/halving: recursive doubling
	TwoLevel      Algorithm = "twolevel"      // algo/twolevel: within hosts, across hosts, within hosts
	Pairwise      Algorithm = "pairwise"      // all-to-all pairwise exchange
	Dissemination Algorithm = "dissemination" // barrier
)

// Function shapes. Buffers are raw bytes holding elements of p.ElemSize()
// bytes; counts are in elements. Block i of a blocked buffer starts at
// element sum(counts[:i]).
type (
	// AllReduceFunc reduces buf across ranks in place.
	AllReduceFunc func(ctx context.Context, p Peers, buf []byte) error
	// BroadcastFunc copies root's buf into every rank's buf.
	BroadcastFunc func(ctx context.Context, p Peers, buf []byte, root int) error
	// ReduceFunc leaves the reduction in root's buf; other ranks' buf is
	// used as scratch and its contents are unspecified afterwards.
	ReduceFunc func(ctx context.Context, p Peers, buf []byte, root int) error
	// ReduceScatterFunc reduces buf (all blocks) and leaves block Rank()
	// reduced in place; other blocks are scratch afterwards.
	ReduceScatterFunc func(ctx context.Context, p Peers, buf []byte, counts []int) error
	// AllGatherFunc starts with this rank's block in place in buf and
	// leaves every rank's block in every buf.
	AllGatherFunc func(ctx context.Context, p Peers, buf []byte, counts []int) error
	// GatherFunc collects every rank's block (in place in its own buf) into
	// root's buf; other ranks' buf is scratch.
	GatherFunc func(ctx context.Context, p Peers, buf []byte, counts []int, root int) error
	// ScatterFunc sends block i of root's buf to rank i, which finds it in
	// place in its buf; other blocks of non-root bufs are scratch.
	ScatterFunc func(ctx context.Context, p Peers, buf []byte, counts []int, root int) error
	// AllToAllFunc sends block j of send (sendCounts[j] elements) to rank j
	// and receives rank j's block for us into block j of recv.
	AllToAllFunc func(ctx context.Context, p Peers, send []byte, sendCounts []int, recv []byte, recvCounts []int) error
	// BarrierFunc returns once every rank has entered it.
	BarrierFunc func(ctx context.Context, p Peers) error
)
