// Package slab holds the small allocation-free containers of a call's
// peers (the root's peers type): a slab of values handed out one at a
// time, and a set of ranks.
package slab

// Slab hands out values one at a time without an allocation each: the
// first few from inside it, the rest from blocks. A value it has handed
// out stays where it is (a full block is left to its users, not grown).
// It is not safe for concurrent use.
type Slab[T any] struct {
	inline [2]T
	n      int
	block  []T
}

// Next returns a zero value that no one else has.
func (s *Slab[T]) Next() *T {
	if s.n < len(s.inline) {
		s.n++
		return &s.inline[s.n-1]
	}
	if len(s.block) == cap(s.block) {
		s.block = make([]T, 0, 16)
	}
	s.block = s.block[:len(s.block)+1]
	return &s.block[len(s.block)-1]
}

// Reset makes s zero again: it clears the inline values it handed out and
// leaves its block to the garbage collector (its users may still hold
// pointers into it).
func (s *Slab[T]) Reset() {
	clear(s.inline[:min(s.n, len(s.inline))])
	s.n, s.block = 0, nil
}

// Ranks is a set of ranks, without allocation up to 64 ranks.
type Ranks struct {
	low  uint64
	high map[int]bool
}

// Add adds r and reports whether it was new.
func (s *Ranks) Add(r int) bool {
	if r < 64 {
		had := s.low&(1<<r) != 0
		s.low |= 1 << r
		return !had
	}
	if s.high == nil {
		s.high = map[int]bool{}
	}
	had := s.high[r]
	s.high[r] = true
	return !had
}
