package goccl

import (
	"errors"
	"testing"
)

// FuzzDecodeObject feeds arbitrary bytes, as a peer's object message, to
// the object collectives' decoder: it must never panic, and a failure must
// wrap ErrProtocol and name the peer.
func FuzzDecodeObject(f *testing.F) {
	type msg struct {
		Name string
		Vals []int
		M    map[string]float64
	}
	for _, v := range []any{msg{"a", []int{1, 2}, map[string]float64{"x": 1}}, []string{"x", ""}, 42} {
		b, err := encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	c := &Comm{rank: 0}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<10 {
			return // long inputs only slow the search; lengths inside gob are what matter
		}
		for _, err := range []error{
			func() error { _, err := decode[msg](c, "all_gather_object", 3, b); return err }(),
			func() error { _, err := decode[[]string](c, "all_gather_object", 3, b); return err }(),
			func() error { _, err := decode[int](c, "all_gather_object", 3, b); return err }(),
		} {
			var ge *Error
			if err != nil && (!errors.Is(err, ErrProtocol) || !errors.As(err, &ge) || ge.Peer != 3) {
				t.Fatalf("decode error %v: want ErrProtocol naming peer 3", err)
			}
		}
	})
}
