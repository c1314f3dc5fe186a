package goccl

import (
	"context"
	"slices"
	"sort"

	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/rendezvous"
	"github.com/goccl/goccl/internal/wire"
)

// NewGroup makes a communicator of some of c's ranks (torch's new_group).
// Every rank of c must call NewGroup with the same ranks, in the same order
// relative to its other NewGroup and Split calls. Members get the group,
// ordered by their rank in c; ranks not in the list get (nil, nil). The
// group shares c's connections and ends when c's world is closed. A member
// that cannot map the group's shared-memory board, where its peers may
// have, gets the error and aborts c, which its peers then hear of.
func (c *Comm) NewGroup(ranks []int) (*Comm, error) {
	const name = "new_group"
	if err := c.usable(name); err != nil {
		return nil, err
	}
	if len(ranks) == 0 {
		return nil, invalid(name, c.rank, "empty rank list")
	}
	sorted := slices.Clone(ranks)
	sort.Ints(sorted)
	for i, r := range sorted {
		if r < 0 || r >= c.Size() {
			return nil, invalid(name, c.rank, "rank %d not in group of size %d", r, c.Size())
		}
		if i > 0 && sorted[i-1] == r {
			return nil, invalid(name, c.rank, "rank %d listed twice", r)
		}
	}
	return c.child(name, sorted)
}

// child makes the group of c's ranks members (in order), or nil if this
// rank is not one of them. Every rank of c advances the child counter, so
// all members derive the same group id.
//
// A member that cannot get the group's shared-memory board where the
// transport offers one (newBoard) fails, and aborts c: the other members
// may have the board, and their small collectives on the group would
// wait on this rank's slot until the timeout; the abort makes them fail
// at once, naming this rank and why.
func (c *Comm) child(op string, members []int) (*Comm, error) {
	n := c.children.Add(1)
	me := slices.Index(members, c.rank)
	world := make([]int, len(members))
	for i, r := range members {
		world[i] = c.ranks[r]
	}
	be, err := c.be.SplitOf(members, me) // every rank of c, members or not, as MPI_Comm_split needs
	if me < 0 || err != nil {
		return nil, err
	}
	g := &Comm{shared: c.shared, id: wire.GroupID(c.id, n, world), rank: me, ranks: world, opts: c.opts, be: be,
		perHost: rendezvous.GroupBlocks(c.shared.perHost, world), segLog: segmentLog(c.shared.segments, world, me)}
	be.Attach(g.backendLinks())
	if g.board, err = newBoard(g, c.shared.boarder); err != nil {
		e := &Error{Op: op, Rank: c.rank, Peer: -1, Err: err}
		c.abort(e)
		return nil, e
	}
	c.shared.groups.LoadOrStore(g.id, g) // a hash collision keeps the first
	return g, nil
}

// NoColor is the Split color of ranks that join no group.
const NoColor = -1

// Split partitions c into groups (MPI_Comm_split, ncclCommSplit): ranks
// that pass the same color form a group, ordered by key and then by rank in
// c. It is a collective on c. A rank that passes NoColor gets (nil, nil).
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	const name = "split"
	if color < NoColor {
		return nil, invalid(name, c.rank, "color %d is negative (use NoColor)", color)
	}
	all := make([]int64, 2*c.Size())
	if err := c.AllGather(commslog.Internal(ctx), []int64{int64(color), int64(key)}, all); err != nil {
		return nil, err
	}
	type member struct{ rank, key int }
	var ms []member
	for r := 0; r < c.Size(); r++ {
		if int(all[2*r]) == color && color != NoColor {
			ms = append(ms, member{r, int(all[2*r+1])})
		}
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].key < ms[j].key })
	members := make([]int, len(ms))
	for i, m := range ms {
		members[i] = m.rank
	}
	return c.child(name, members) // none for NoColor: ms is empty
}
