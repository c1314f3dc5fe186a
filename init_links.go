package goccl

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/rendezvous"
	"github.com/goccl/goccl/reduceop"
)

// Addresses under lazy links.
//
// transport/tcp links a pair of ranks when they first talk (tcp/lazy.go)
// and reads the peer's address, once, from its KV. Were that KV the store
// itself, the store would have to outlive every link ever made: a rank
// that forwards a broadcast after rank 0, the store's host, has finished
// and closed could not find its children; and every rank would read
// O(log N) addresses from the store at Init. So the KV that Init gives
// transport/tcp is an address book in front of the store
// (rendezvous.AddrBook), and Init's
// closing synchronisation fills it with every rank's address, passed from
// rank to rank as NCCL's bootstrap does:
//
//  1. transport/tcp publishes this rank's address (a store Set, which the
//     book also keeps) and links the ring neighbours: rank r dials r+1,
//     whose address it reads (one store Get).
//  2. shareAddrs runs algo.BruckAllGatherAhead over 64-byte address slots:
//     rank r starts with its own address and r+1's, and in round k says
//     hello to rank r+2^k, whose address an earlier round brought into the
//     book (so that the hello dials it without the store), then answers
//     the hello of rank r-2^k over the link that hello came on. It is also
//     Init's barrier: no rank leaves it before every rank has entered it,
//     hence before every rank has made its last store request of Init.
//  3. Every later link is dialed from the book, without the store.
//
// Init's store requests for addresses are then N Sets and N Gets over the
// job (with the liveness key, 3N in all under transport tcp), and the
// store is needed after Init only by what leans on it (Shrink, Readmit,
// the liveness keys), never to make a link.

// shareAddrs is Init's closing synchronisation under lazy links: it fills
// the address book with every rank's address (steps 2 and 3 above).
func (c *Comm) shareAddrs(ctx context.Context) error {
	b := c.shared.rdv.Book()
	n, me := c.Size(), c.rank
	buf := make([]byte, rendezvous.AddrSlot*n)
	for _, q := range []int{me, (me + 1) % n} {
		a, err := b.Addr(ctx, q) // known: published, or read to link the ring
		if err != nil {
			return &Error{Op: "init", Rank: me, Peer: q, Err: fmt.Errorf("address of rank %d: %w", q, err)}
		}
		if !rendezvous.PutSlot(buf, q, a) {
			return fmt.Errorf("goccl: init rank %d: rank %d's address %q does not fit the exchange", me, q, a)
		}
	}
	counts := make([]int, n)
	for i := range counts {
		counts[i] = rendezvous.AddrSlot
	}
	// learned runs between rounds, on this goroutine: the slots it reads
	// are not written again.
	var bad error
	learned := func(first, m int) {
		if err := b.Learn(buf, first, m); err != nil && bad == nil {
			bad = fmt.Errorf("goccl: init rank %d: %w", me, err)
		}
	}
	k := c.newCall(commslog.AllGatherIntoTensor, reduceop.Uint8, len(buf), "bruck")
	p := c.peers(k, reduceop.Uint8, nil)
	k.run = func(ctx context.Context) error { return algo.BruckAllGatherAhead(ctx, p, buf, counts, learned) }
	if err := k.exec(ctx); err != nil {
		return err
	}
	return bad
}
