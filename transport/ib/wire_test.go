package ib

import (
	"bytes"
	"testing"
)

// FuzzParseHeader: a peer's header never makes the parser panic, and an
// eager header it accepts announces exactly the bytes that came.
func FuzzParseHeader(f *testing.F) {
	b := make([]byte, headerLen)
	(&header{kind: kindEager, n: 3}).put(b)
	f.Add(append(b, 1, 2, 3), headerLen+3)
	(&header{kind: kindRTS, n: 1 << 20, id: 7}).put(b)
	f.Add(b, headerLen)
	f.Fuzz(func(t *testing.T, b []byte, got int) {
		if got < 0 || got > len(b) {
			return // the adapter never reports more than the slot holds
		}
		h, err := parseHeader(b, got, 1<<32)
		if err == nil && h.kind == kindEager && int(h.n) != got-headerLen {
			t.Fatalf("eager header of %d bytes accepted with %d received", h.n, got)
		}
	})
}

// FuzzOpenInfo: an entry from the store never makes the check panic, and
// only the sealed one passes.
func FuzzOpenInfo(f *testing.F) {
	nonce := bytes.Repeat([]byte{9}, nonceLen)
	q := qpInfo{lid: 3, qpn: 0x1234, psn: 0x55, mtu: 5, slot: 1 << 14, depth: 32}
	sealed := sealInfo([]byte("k"), "job", 1, 0, nonce, &q)
	f.Add(sealed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		got, err := openInfo([]byte("k"), "job", 1, 0, nonce, v)
		if err == nil && (!bytes.Equal(v, sealed) || got != q) {
			t.Fatalf("entry %x accepted as %+v", v, got)
		}
	})
}

func TestSealRoundTrip(t *testing.T) {
	nonce := bytes.Repeat([]byte{1}, nonceLen)
	q := qpInfo{lid: 7, gid: [16]byte{0xfe, 0x80, 15: 1}, qpn: 0xabcdef, psn: 0x123456, mtu: 4, slot: 4096, depth: 8}
	v := sealInfo([]byte("s"), "j", 2, 5, nonce, &q)
	if got, err := openInfo([]byte("s"), "j", 2, 5, nonce, v); err != nil || got != q {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for name, open := range map[string]func() error{
		"other secret":    func() error { _, err := openInfo([]byte("t"), "j", 2, 5, nonce, v); return err },
		"other job":       func() error { _, err := openInfo([]byte("s"), "k", 2, 5, nonce, v); return err },
		"ranks swapped":   func() error { _, err := openInfo([]byte("s"), "j", 5, 2, nonce, v); return err },
		"stale nonce":     func() error { _, err := openInfo([]byte("s"), "j", 2, 5, make([]byte, nonceLen), v); return err },
		"truncated entry": func() error { _, err := openInfo([]byte("s"), "j", 2, 5, nonce, v[:len(v)-1]); return err },
	} {
		if open() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
