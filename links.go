package goccl

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport/tcp"
)

// Addresses under lazy links.
//
// transport/tcp links a pair of ranks when they first talk (tcp/lazy.go)
// and reads the peer's address, once, from its KV. Were that KV the store
// itself, the store would have to outlive every link ever made: a rank
// that forwards a broadcast after rank 0, the store's host, has finished
// and closed could not find its children; and every rank would read
// O(log N) addresses from the store at Init. So the KV that Init gives
// transport/tcp is an address book in front of the store, and Init's
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

// addrSlot is the room for one address in the exchange: a length byte and
// "host:port" (an IPv6 address with brackets and port fits in 47).
const addrSlot = 64

// addrBook is a tcp.KV that answers address lookups from what it knows
// and asks the store otherwise.
type addrBook struct {
	kv    tcp.KV
	mu    sync.Mutex
	addrs [][]byte // by rank; nil: not known yet
}

func newAddrBook(kv tcp.KV, size int) *addrBook {
	return &addrBook{kv: kv, addrs: make([][]byte, size)}
}

// addrRank returns the rank whose address key is key.
func (b *addrBook) addrRank(key string) (int, bool) {
	prefix := strings.TrimSuffix(tcp.AddrKey(0), "0")
	s, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	r, err := strconv.Atoi(s)
	return r, err == nil && r >= 0 && r < len(b.addrs)
}

// Set implements tcp.KV: it publishes in the store and keeps the address.
func (b *addrBook) Set(ctx context.Context, key string, value []byte) error {
	if err := b.kv.Set(ctx, key, value); err != nil {
		return err
	}
	if r, ok := b.addrRank(key); ok {
		b.put(r, value)
	}
	return nil
}

// Get implements tcp.KV: an address the book knows, else the store's.
func (b *addrBook) Get(ctx context.Context, key string) ([]byte, error) {
	r, ok := b.addrRank(key)
	if ok {
		if a := b.get(r); a != nil {
			return a, nil
		}
	}
	v, err := b.kv.Get(ctx, key)
	if err == nil && ok {
		b.put(r, v)
	}
	return v, err
}

func (b *addrBook) put(r int, a []byte) {
	b.mu.Lock()
	b.addrs[r] = append([]byte(nil), a...)
	b.mu.Unlock()
}

func (b *addrBook) get(r int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addrs[r]
}

var _ tcp.KV = (*addrBook)(nil)
var _ tcp.KV = store.Store(nil)

// shareAddrs is Init's closing synchronisation under lazy links: it fills
// the address book with every rank's address (steps 2 and 3 above).
func (c *Comm) shareAddrs(ctx context.Context) error {
	b := c.shared.rdv.book
	n, me := c.Size(), c.rank
	buf := make([]byte, addrSlot*n)
	for _, q := range []int{me, (me + 1) % n} {
		a, err := b.Get(ctx, tcp.AddrKey(q)) // known: published, or read to link the ring
		if err != nil {
			return &Error{Op: "init", Rank: me, Peer: q, Err: fmt.Errorf("address of rank %d: %w", q, err)}
		}
		if len(a) == 0 || len(a) >= addrSlot {
			return fmt.Errorf("goccl: init rank %d: rank %d's address %q does not fit the exchange", me, q, a)
		}
		buf[q*addrSlot] = byte(len(a))
		copy(buf[q*addrSlot+1:], a)
	}
	counts := make([]int, n)
	for i := range counts {
		counts[i] = addrSlot
	}
	// learned runs between rounds, on this goroutine: the slots it reads
	// are not written again.
	var bad error
	learned := func(first, m int) {
		for i := range m {
			q := (first + i) % n
			slot := buf[q*addrSlot : (q+1)*addrSlot]
			l := int(slot[0])
			if l == 0 || l >= addrSlot {
				if bad == nil {
					bad = fmt.Errorf("goccl: init rank %d: %w: rank %d's address slot says %d bytes", me, ErrProtocol, q, l)
				}
				continue
			}
			b.put(q, slot[1:1+l])
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
