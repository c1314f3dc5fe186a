package rendezvous

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

// AddrSlot is the room for one address in the closing exchange of lazy
// links: a length byte and "host:port" (an IPv6 address with brackets
// and port fits in 47).
const AddrSlot = 64

// AddrBook is a tcp.KV in front of the epoch's store: it publishes this
// rank's address in the store and keeps it, and answers address lookups
// from what it knows, asking the store otherwise. The closing exchange
// (the root's shareAddrs) fills it with every rank's address, so that no
// later link needs the store.
type AddrBook struct {
	kv    tcp.KV
	mu    sync.Mutex
	addrs [][]byte // by rank; nil: not known yet
}

var (
	_ tcp.KV = (*AddrBook)(nil)
	_ tcp.KV = store.Store(nil)
)

// NewAddrBook returns an empty book of size ranks' addresses over kv.
func NewAddrBook(kv tcp.KV, size int) *AddrBook {
	return &AddrBook{kv: kv, addrs: make([][]byte, size)}
}

// addrRank returns the rank whose address key is key.
func (b *AddrBook) addrRank(key string) (int, bool) {
	prefix := strings.TrimSuffix(tcp.AddrKey(0), "0")
	s, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	r, err := strconv.Atoi(s)
	return r, err == nil && r >= 0 && r < len(b.addrs)
}

// Set implements tcp.KV: it publishes in the store and keeps the address.
func (b *AddrBook) Set(ctx context.Context, key string, value []byte) error {
	if err := b.kv.Set(ctx, key, value); err != nil {
		return err
	}
	if r, ok := b.addrRank(key); ok {
		b.put(r, value)
	}
	return nil
}

// Get implements tcp.KV: an address the book knows, else the store's.
func (b *AddrBook) Get(ctx context.Context, key string) ([]byte, error) {
	r, ok := b.addrRank(key)
	if ok {
		if a := b.Known(r); a != nil {
			return a, nil
		}
	}
	v, err := b.kv.Get(ctx, key)
	if err == nil && ok {
		b.put(r, v)
	}
	return v, err
}

func (b *AddrBook) put(r int, a []byte) {
	b.mu.Lock()
	b.addrs[r] = append([]byte(nil), a...)
	b.mu.Unlock()
}

// Known returns rank r's address if the book has it, else nil.
func (b *AddrBook) Known(r int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addrs[r]
}

// Addr returns rank q's address through the book: this rank's own and
// its ring neighbour's are known once the TCP endpoint is up.
func (b *AddrBook) Addr(ctx context.Context, q int) ([]byte, error) {
	return b.Get(ctx, tcp.AddrKey(q))
}

// PutSlot writes address a into rank q's slot of buf (AddrSlot bytes a
// rank), and reports whether it fits.
func PutSlot(buf []byte, q int, a []byte) bool {
	if len(a) == 0 || len(a) >= AddrSlot {
		return false
	}
	buf[q*AddrSlot] = byte(len(a))
	copy(buf[q*AddrSlot+1:], a)
	return true
}

// Learn keeps the addresses in the m slots of buf from rank first on
// (modulo the ranks of the book), and says which slot, if any, is bad.
func (b *AddrBook) Learn(buf []byte, first, m int) error {
	var bad error
	for i := range m {
		q := (first + i) % len(b.addrs)
		slot := buf[q*AddrSlot : (q+1)*AddrSlot]
		l := int(slot[0])
		if l == 0 || l >= AddrSlot {
			if bad == nil {
				bad = fmt.Errorf("%w: rank %d's address slot says %d bytes", transport.ErrProtocol, q, l)
			}
			continue
		}
		b.put(q, slot[1:1+l])
	}
	return bad
}
