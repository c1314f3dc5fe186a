package transport

import (
	"context"
	"errors"
)

// Boarder is an optional capability of an Endpoint whose ranks can share
// memory (transport/mem: goroutines of one process; transport/shm:
// processes of one host; transport/route forwards it). A communicator runs
// its small collectives on a Board instead of over messages: each rank
// writes its contribution into its own part of the block and reads the
// others' straight from theirs, so an 8-byte allreduce costs a few cache
// line transfers and no message, no match and no wake-up while the ranks
// keep pace (NCCL's LL protocol and Open MPI's shared-memory collectives
// do the same). What goes where in the block is the communicator's
// business; the transport provides the memory, the wake-ups and the news
// of a member that is gone.
type Boarder interface {
	// Board returns the block of the group id whose members are the
	// endpoint ranks in ranks (in group order, this rank among them), at
	// least size bytes, zeroed when the first member asks for it. Every
	// member must ask with the same id, ranks and size. Where the members
	// do not all share memory with this rank, or the endpoint cannot
	// offer a board (a fault plan that a board would bypass), the error
	// wraps ErrNoBoard. Any other error is this member's failure alone
	// (no memory, no descriptor, a segment it could not map), while the
	// other members may have the board.
	Board(id uint64, ranks []int, size int) (Board, error)
}

// ErrNoBoard is a Boarder's answer for a group that it offers no board
// to. Every member of the group gets the same answer, so the group can
// run its collectives over messages instead.
var ErrNoBoard = errors.New("no shared board for this group")

// Board is memory shared by the members of a group, with a way to sleep
// until a member has written something.
type Board interface {
	// Bytes is the block: the same memory on every member, 64-byte
	// aligned. Words that members poll must be read and written with
	// sync/atomic.
	Bytes() []byte
	// Wait returns nil once ready reports true. It polls ready for a
	// while, then parks until a member calls Wake (or a member is lost,
	// or the board is closed) and polls again. It returns ctx's error if
	// ctx ends first, and an error wrapping ErrClosed if this member's
	// endpoint is closed. ready must be quick and must not block.
	Wait(ctx context.Context, ready func() bool) error
	// Wake wakes the members parked in Wait after this member has
	// written to the block. It costs an atomic load when nobody is
	// parked.
	Wake()
	// Lost returns nil while group member m is alive, else an error
	// (a *PeerError wrapping ErrPeerClosed) saying that it is gone. A
	// member that is lost wakes every Wait.
	Lost(m int) error
	// Close releases this member's hold on the block.
	Close() error
}
