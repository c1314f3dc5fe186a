package goccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/rendezvous"
)

// Recovering from a lost rank, two ways, both through Init's store:
//
// Shrink, as MPI ULFM's MPI_Comm_shrink: the surviving ranks form a new,
// smaller communicator and go on without the lost ones. Ranks keep their
// order; rank numbers close up.
//
// Readmit, as an elastic launcher restarting a worker: a replacement
// process starts with the lost rank's RANK and GOCCL_REJOIN=1 (or
// WithRejoin), and the survivors call Readmit; together they form the next
// generation of the world, full size, every survivor keeping its rank. A
// survivor's memory (ckpt's shards, say) then restores the newcomer.
//
// Each communicator belongs to a generation of the world (Init makes
// generation 0, each Readmit the next) and, within it, a shrink epoch.
// Ranks meet under store keys named after both, and the TCP handshake
// carries them in the job id, so a stale rank of an older communicator
// cannot connect to a newer one.
//
//	world g0 (6 ranks) --rank 2 and 4 die--> Shrink  -> g0.s1 (4 ranks: 0 1 3 5)
//	                                         Readmit -> g1   (6 ranks, 2 and 4 replaced)
//
// The store must outlive the failure: rank 0 hosts it (as torchrun's
// c10d rendezvous does), so rank 0 must survive, or the job uses a store
// of its own (`goccl store`).

// DefaultShrinkWait is how long Shrink waits for survivors to arrive when
// it does not know what became of every rank.
const DefaultShrinkWait = 2 * time.Second

// JobRank returns this process's rank in the job it was launched into
// (Init's world), which Shrink does not change; Rank for a communicator
// that Init did not make.
func (c *Comm) JobRank() int {
	if r := c.shared.rdv; r != nil && c.id == 0 {
		return r.JobRank
	}
	return c.rank
}

// Shrink forms a new communicator of the ranks that survive a failure,
// like MPI ULFM's MPI_Comm_shrink. Every surviving rank of c calls it,
// usually after a collective failed and aborted c. Ranks keep their order
// and are numbered anew from 0 (JobRank keeps the original number).
//
// Survivors register in Init's store. Shrink decides once every rank of c
// has registered or is known lost: its process is dead (its alive key in
// the store went with its connection) or a failure blamed it. When it
// cannot tell, it decides after the wait (WithShrinkWait,
// DefaultShrinkWait);
// a rank that arrives later is left out and gets an error wrapping
// ErrAborted.
//
// Ranks may go on dying while Shrink runs. Each member of the agreed set
// then connects and says in the store whether it made it; if a member died
// before saying so, or failed, every member sees it and they all agree
// again, without the dead, in the next shrink epoch, until the set is
// stable or c's timeout ends. A member that dies after saying it made it
// is in the result, whose first collective then fails, as after any
// failure.
//
// c stays aborted; close it when done. Only world communicators made by
// Init (or by Shrink and Readmit) can shrink.
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	r, err := c.elastic("shrink")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	old := r.JobRanks()
	var lost []int // job ranks this rank knows to be lost
	c.shared.goneMu.Lock()
	for _, g := range append([]int{int(c.shared.lost.Load())}, c.shared.gone...) {
		if g >= 0 && g < len(old) && g != c.rank {
			lost = append(lost, old[g])
		}
	}
	c.shared.goneMu.Unlock()
	for epoch := r.Shrink + 1; ; epoch++ {
		nr := r.Next(r.Gen, epoch, nil)
		n, members, err := c.shrinkRound(ctx, nr, old, lost)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, errShrinkAgain) || ctx.Err() != nil {
			return nil, &Error{Op: "shrink", Rank: c.rank, Peer: -1, Err: err}
		}
		old, lost = members, nil
	}
}

// errShrinkAgain says a round of Shrink failed because a member died or
// could not connect: every member sees the same and tries again.
var errShrinkAgain = errors.New("a member was lost during shrink")

// testShrinkHook, when set (export_test.go), is called at each stage of a
// round of Shrink: "registered", "agreed", "connected".
var testShrinkHook func(stage string)

// shrinkRound is one round of Shrink in nr's epoch, among the job ranks
// old, of which lost are known lost. It returns the new communicator; or
// errShrinkAgain and the round's members, when a member was lost before
// it said it had connected; or another error, which ends Shrink. nr's
// store is released unless the communicator returned holds it. The store
// keys and what is written there are rendezvous.Round's; what to make of
// them is this function's.
func (c *Comm) shrinkRound(ctx context.Context, nr *rendezvous.Rendezvous, old, lost []int) (*Comm, []int, error) {
	round := nr.Round()
	fail := func(err error) (*Comm, []int, error) {
		nr.Release()
		return nil, nil, err
	}

	// Register, and say which ranks this one knows to be lost.
	if err := round.Register(ctx, lost); err != nil {
		return fail(err)
	}
	if testShrinkHook != nil {
		testShrinkHook("registered")
	}
	// Whether the store keeps alive keys (one with ephemeral keys does):
	// only then does a missing one mean a dead process.
	tracksAlive, err := nr.TracksAlive(ctx)
	if err != nil {
		return fail(err)
	}
	dead := func(jr int) (bool, error) {
		a, err := nr.Alive(ctx, jr)
		return !a, err
	}

	// Wait until everyone is accounted for, or the wait is over.
	wait := c.opts.shrinkWait
	if wait <= 0 {
		wait = DefaultShrinkWait
	}
	deadline := time.Now().Add(wait)
	in := map[int]bool{} // job ranks registered so far
	for {
		joined, err := round.Joined(ctx)
		if err != nil {
			return fail(err)
		}
		for i := int64(len(in)) + 1; i <= joined; i++ {
			jr, err := round.Registered(ctx, i)
			if err != nil {
				return fail(err)
			}
			in[jr] = true
		}
		gone := 0
		for _, jr := range old {
			if in[jr] {
				continue
			}
			d, err1 := dead(jr)
			l, err2 := round.Blamed(ctx, jr)
			if err := errors.Join(err1, err2); err != nil {
				return fail(err)
			}
			if d || l {
				gone++ // its process is dead, or a failure blamed it
			}
		}
		if len(in)+gone >= len(old) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return fail(classify(ctx.Err()))
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The first rank to get here proposes who is in: the registered ranks
	// still alive. Everyone takes the first proposal.
	joined, err := round.Joined(ctx)
	if err != nil {
		return fail(err)
	}
	var members []int
	for i := int64(1); i <= joined; i++ {
		jr, err := round.Registered(ctx, i)
		if err != nil {
			return fail(err)
		}
		if d, err := dead(jr); err != nil {
			return fail(err)
		} else if d && tracksAlive {
			continue // registered, then died
		}
		members = append(members, jr)
	}
	slices.Sort(members)
	if members, err = round.Propose(ctx, members); err != nil {
		return fail(err)
	}
	me := slices.Index(members, nr.JobRank)
	if me < 0 {
		return fail(fmt.Errorf("%w: job rank %d arrived after the survivors %v had shrunk the communicator", ErrAborted, nr.JobRank, members))
	}
	nr.Members = members
	if testShrinkHook != nil {
		testShrinkHook("agreed")
	}

	// Connect. A member that dies or fails meanwhile would leave the others
	// waiting for it until the timeout: watch for that, and stop.
	cctx, stop := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			again, _, err := round.Status(cctx, members, tracksAlive)
			if err != nil {
				return // cctx ended
			}
			if again != "" {
				stop(fmt.Errorf("%w: %s", errShrinkAgain, again))
				return
			}
			select {
			case <-cctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	var n *Comm
	ep, err := nr.ConnectTCP(cctx, me, len(members))
	if err == nil {
		if n, err = newComm(ep, c.opts); err != nil {
			ep.Close()
			n = nil
		} else {
			n.shared.rdv = nr.Next(nr.Gen, nr.Shrink, members) // n's own hold on the store
			if err = n.settle(cctx); err != nil {
				n = nil // settle closed it
			}
		}
	}
	if err == nil && testShrinkHook != nil {
		testShrinkHook("connected")
	}
	// Say how it went, then stop the watch.
	serr := round.Say(ctx, err)
	stop(nil)
	wg.Wait()

	// Agree: the round stands if every member said ok, counting one that
	// died after saying so. A member's word is final once written, and a
	// dead member's silence is final, so every member decides the same.
	again := ""
	for serr == nil {
		var waiting bool
		if again, waiting, serr = round.Status(ctx, members, tracksAlive); serr != nil || again != "" || !waiting {
			break
		}
		select {
		case <-ctx.Done():
			serr = classify(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if serr == nil && again == "" {
		nr.Release()
		return n, nil, nil
	}
	if n != nil {
		n.Abort(fmt.Errorf("%w: %s", errShrinkAgain, again))
		n.Close()
	}
	if serr != nil {
		return fail(serr)
	}
	var alive []int // the next round's ranks
	for _, jr := range members {
		if d, err := dead(jr); err != nil {
			return fail(err)
		} else if !d || !tracksAlive {
			alive = append(alive, jr)
		}
	}
	nr.Release()
	return nil, alive, fmt.Errorf("%w: %s", errShrinkAgain, again)
}

// Readmit forms the next generation of the world with replacement ranks:
// every survivor calls it (on the communicator that failed, or on one that
// Shrink made), and each lost rank is taken by a new process started with
// that rank's RANK and GOCCL_REJOIN=1 (WithRejoin). The result has the
// size of Init's world and every survivor keeps its JobRank as its rank,
// so state kept by rank (ckpt.Store) fits it. It returns once every rank
// has joined, or fails when the timeout ends first.
func (c *Comm) Readmit(ctx context.Context) (*Comm, error) {
	r, err := c.elastic("readmit")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	nr := r.Next(r.Gen+1, 0, nil)
	ep, err := nr.ConnectTCP(ctx, r.JobRank, r.JobSize)
	if err != nil {
		nr.Release()
		return nil, &Error{Op: "readmit", Rank: c.rank, Peer: -1, Err: err}
	}
	n, err := newComm(ep, c.opts)
	if err != nil {
		ep.Close()
		nr.Release()
		return nil, &Error{Op: "readmit", Rank: c.rank, Peer: -1, Err: err}
	}
	n.shared.rdv = nr
	if err := n.settle(ctx); err != nil {
		return nil, &Error{Op: "readmit", Rank: c.rank, Peer: -1, Err: err}
	}
	return n, nil
}

// elastic returns c's rendezvous, or why c cannot shrink or readmit.
func (c *Comm) elastic(op string) (*rendezvous.Rendezvous, error) {
	r := c.shared.rdv
	switch {
	case c.id != 0:
		return nil, invalid(op, c.rank, "only a world communicator can %s, not a group", op)
	case r == nil:
		return nil, invalid(op, c.rank, "needs the rendezvous store of Init (a communicator from New or NewLocal has none)")
	case c.closed.Load():
		return nil, invalid(op, c.rank, "communicator closed")
	}
	return r, nil
}
