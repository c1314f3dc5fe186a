package rendezvous

import (
	"errors"
	"strings"
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

// TestAddrBook: the book publishes through the store and keeps what it
// published or read; the exchange's slots carry addresses that fit, and a
// bad slot is a protocol error naming its rank.
func TestAddrBook(t *testing.T) {
	kv := &counted{memStore: newMemStore()}
	b := NewAddrBook(kv, 4)
	ctx := t.Context()
	if err := b.Set(ctx, tcp.AddrKey(1), []byte("10.0.0.1:5")); err != nil {
		t.Fatal(err)
	}
	if string(kv.kv[tcp.AddrKey(1)]) != "10.0.0.1:5" || string(b.Known(1)) != "10.0.0.1:5" {
		t.Fatalf("Set: store %q, book %q", kv.kv[tcp.AddrKey(1)], b.Known(1))
	}
	kv.Set(ctx, tcp.AddrKey(2), []byte("10.0.0.2:6"))
	before := kv.n
	for range 2 {
		if a, err := b.Addr(ctx, 2); err != nil || string(a) != "10.0.0.2:6" {
			t.Fatalf("Addr(2) = %q, %v", a, err)
		}
	}
	if kv.n-before != 1 {
		t.Errorf("two reads of one address asked the store %d times, want once", kv.n-before)
	}
	if err := b.Set(ctx, "other", []byte("x")); err != nil || b.Known(0) != nil || b.Known(3) != nil {
		t.Errorf("a key that is no address went into the book")
	}

	buf := make([]byte, 4*AddrSlot)
	if PutSlot(buf, 0, nil) || PutSlot(buf, 0, []byte(strings.Repeat("a", AddrSlot))) {
		t.Errorf("an empty or too long address fits a slot")
	}
	long := "[2001:db8:85a3:8d3:1319:8a2e:370:7348]:65535" // 46 bytes
	if !PutSlot(buf, 3, []byte(long)) || !PutSlot(buf, 0, []byte("h:1")) {
		t.Fatal("an address does not fit its slot")
	}
	n := NewAddrBook(kv, 4)
	if err := n.Learn(buf, 3, 2); err != nil { // ranks 3 and 0, round the ring
		t.Fatal(err)
	}
	if string(n.Known(3)) != long || string(n.Known(0)) != "h:1" || n.Known(1) != nil {
		t.Errorf("learned %q, %q, %q", n.Known(3), n.Known(0), n.Known(1))
	}
	err := n.Learn(buf, 0, 3) // slots 1 and 2 are empty
	if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "rank 1's address slot says 0 bytes") {
		t.Errorf("Learn of empty slots: %v", err)
	}
}
