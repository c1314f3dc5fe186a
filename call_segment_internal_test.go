package goccl

import "testing"

type hints map[int]int

func (h hints) SegmentBytes(peer int) int { return h[peer] }

// segmentLog takes the hint only where every other member has one, the
// smallest, rounded down to a power of two, and asks none about the rank
// itself.
func TestSegmentLog(t *testing.T) {
	for _, tc := range []struct {
		h     hints
		world []int
		me    int
		want  uint8
	}{
		{hints{1: 4 << 20, 2: 4 << 20}, []int{0, 1, 2}, 0, 22},
		{hints{1: 4 << 20, 2: 3 << 20}, []int{0, 1, 2}, 0, 21}, // 3 MiB: 2 MiB
		{hints{1: 4 << 20}, []int{0, 1, 2}, 0, 0},              // rank 2 gives none
		{hints{0: 1 << 20, 2: 1 << 20}, []int{0, 1, 2}, 1, 20}, // its own rank is not asked
		{hints{5: 1 << 16, 7: 1 << 16}, []int{7, 3, 5}, 1, 16}, // world ranks, not group ranks
		{hints{}, []int{0}, 0, 0},
	} {
		if got := segmentLog(tc.h, tc.world, tc.me); got != tc.want {
			t.Errorf("segmentLog(%v, %v, %d) = %d, want %d", tc.h, tc.world, tc.me, got, tc.want)
		}
	}
	if got := segmentLog(nil, []int{0, 1}, 0); got != 0 {
		t.Errorf("no hinter: %d, want 0", got)
	}
}
