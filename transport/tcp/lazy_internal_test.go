package tcp

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/goccl/goccl/transport"
)

// The tie-break, decided where a dial arrives: while this rank dials the
// peer too, the lower rank's connection wins.
func TestLazyTieBreak(t *testing.T) {
	newLinks := func(rank int) *links {
		e := &endpoint{rank: rank, size: 4, peers: make([]atomic.Pointer[peer], 4), m: transport.NewMatcher(4)}
		return &links{e: e, state: make(map[int]*linkState)}
	}
	// Rank 1 dials rank 3, and rank 3's dial arrives: refused, rank 1's wins.
	l := newLinks(1)
	l.stateOf(3).dialing = true
	if err := l.admit(3); err == nil || !isTieBreak(err) {
		t.Errorf("rank 1 dialing rank 3 admitted rank 3's dial: %v", err)
	}
	// Rank 3 dials rank 1, and rank 1's dial arrives: admitted.
	l = newLinks(3)
	l.stateOf(1).dialing = true
	if err := l.admit(1); err != nil {
		t.Errorf("rank 3 dialing rank 1 refused rank 1's dial: %v", err)
	}
	// Once admitted, a second dial from the same rank is a duplicate.
	if err := l.admit(1); err == nil || !errors.Is(err, errRefused) {
		t.Errorf("a second dial from rank 1 was admitted: %v", err)
	}
	// Undoing the admission (its handshake failed) frees the pair.
	l.unadmit(1)
	if err := l.admit(1); err != nil {
		t.Errorf("after unadmit: %v", err)
	}
	// Nobody dialing: a dial from either side is admitted.
	l = newLinks(0)
	if err := l.admit(2); err != nil {
		t.Errorf("rank 0, not dialing, refused rank 2: %v", err)
	}
}
