package algo

import (
	"context"
)

// Peers is everything an algorithm sees of the world: its rank, the group
// size, non-blocking sends and receives to other ranks of the group, and a
// reducer. Messages from one rank to another are delivered in the order the
// sends were started, so an algorithm needs no tags of its own.
//
// Implementations (the root package's communicator, the simulator, the
// counting wrapper in tests) own all goroutines, timeouts and transport
// details; an algorithm is a plain function of a Peers and its buffers.
type Peers interface {
	// Rank is this rank's index in the group, in [0, Size()).
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// Isend starts sending b to rank to. b must not change until the
	// returned Request completes.
	Isend(to int, b []byte) Request
	// Irecv starts receiving the next message from rank from into b; the
	// message must be exactly len(b) bytes.
	Irecv(from int, b []byte) Request
	// ElemSize is the size in bytes of one element of the buffers.
	ElemSize() int
	// Reduce computes dst[i] = dst[i] op src[i] element-wise; len(dst) ==
	// len(src), a multiple of ElemSize.
	Reduce(dst, src []byte) error
}

// Request is a started send or receive.
type Request interface {
	Wait(ctx context.Context) error
}
