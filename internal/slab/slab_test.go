package slab_test

import (
	"testing"

	"github.com/goccl/goccl/internal/slab"
)

// Values handed out stay where they are and are zero; Reset clears what
// was handed out and starts again.
func TestSlab(t *testing.T) {
	var s slab.Slab[[4]int]
	var got []*[4]int
	for i := range 40 {
		v := s.Next()
		if *v != [4]int{} {
			t.Fatalf("value %d not zero: %v", i, *v)
		}
		v[0] = i + 1
		got = append(got, v)
	}
	for i, v := range got {
		if v[0] != i+1 {
			t.Fatalf("value %d moved or was shared: %v", i, *v)
		}
	}
	s.Reset()
	if v := s.Next(); *v != [4]int{} {
		t.Fatalf("after Reset: %v", *v)
	}
	if n := testing.AllocsPerRun(100, func() { s.Reset(); s.Next(); s.Next() }); n != 0 {
		t.Errorf("%v allocations for two values", n)
	}
}

func TestRankSet(t *testing.T) {
	var s slab.RankSet
	for _, r := range []int{0, 63, 64, 1000, 5} {
		if s.Has(r) || !s.Add(r) || !s.Has(r) || s.Add(r) {
			t.Fatalf("rank %d: add/has disagree", r)
		}
	}
	if s.Has(1) || s.Has(65) {
		t.Fatal("ranks never added are in the set")
	}
	var small slab.RankSet
	if n := testing.AllocsPerRun(100, func() { small.Add(7); small.Has(7) }); n != 0 {
		t.Errorf("%v allocations below 64", n)
	}
}
