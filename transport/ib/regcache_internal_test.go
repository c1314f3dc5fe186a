package ib

import (
	"errors"
	"testing"
)

// countDev is a Device that only registers memory, counting live regions.
type countDev struct{ live int }

type countMR struct {
	d    *countDev
	gone bool
}

func (d *countDev) Name() string   { return "count" }
func (d *countDev) Port() PortInfo { return PortInfo{} }
func (d *countDev) RegMR(b []byte, a Access) (MR, error) {
	d.live++
	return &countMR{d: d}, nil
}
func (d *countDev) CreateCQ(int) (CQ, error)        { return nil, errors.ErrUnsupported }
func (d *countDev) CreateQP(CQ, QPCaps) (QP, error) { return nil, errors.ErrUnsupported }
func (d *countDev) Close() error                    { return nil }
func (m *countMR) LKey() uint32                     { return 1 }
func (m *countMR) RKey() uint32                     { return 1 }
func (m *countMR) Dereg() error {
	if m.gone {
		return errors.New("deregistered twice")
	}
	m.gone = true
	m.d.live--
	return nil
}

// TestRegCacheInFlight: an entry dropped (by Forget or by eviction) while
// an operation uses it stays registered until the operation lets go.
func TestRegCacheInFlight(t *testing.T) {
	d := &countDev{}
	c := newRegCache(d, 100)
	a, b := make([]byte, 100), make([]byte, 100)
	ea, err := c.get(a)
	if err != nil {
		t.Fatal(err)
	}
	if !c.forget(a) || d.live != 1 {
		t.Fatalf("forget in flight: %d live regions, want 1", d.live)
	}
	c.put(ea)
	if d.live != 0 {
		t.Fatalf("after the last user: %d live regions, want 0", d.live)
	}
	// Eviction: b pushes a (in use) out of a cache of 100 bytes.
	ea, _ = c.get(a)
	eb, _ := c.get(b)
	if d.live != 2 {
		t.Fatalf("%d live regions, want 2 (a is evicted but in use)", d.live)
	}
	c.put(ea)
	if d.live != 1 {
		t.Fatalf("%d live regions after a's user let go, want 1", d.live)
	}
	c.put(eb)
	// A longer buffer at the same address replaces the entry.
	ea, _ = c.get(a[:10:10])
	if len(ea.buf) != 10 {
		t.Fatalf("entry covers %d bytes, want 10", len(ea.buf))
	}
	c.put(ea)
	ea, _ = c.get(a)
	if len(ea.buf) != 100 || c.snapshot().Registrations != 5 {
		t.Fatalf("entry covers %d bytes after %d registrations, want 100 after 5", len(ea.buf), c.snapshot().Registrations)
	}
	c.put(ea)
	c.close()
	if d.live != 0 {
		t.Fatalf("after close: %d live regions", d.live)
	}
}
