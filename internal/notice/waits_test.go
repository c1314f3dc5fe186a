package notice_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/notice"
	"github.com/goccl/goccl/transport/mem"
)

func TestChain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		waits map[int]int
		from  int
		end   int
		chain []int
		ok    bool
	}{
		{"direct", map[int]int{0: 2}, 0, 2, []int{0, 2}, true},
		{"through two", map[int]int{1: 0, 0: 3, 3: 2}, 1, 2, []int{1, 0, 3, 2}, true},
		{"a loop", map[int]int{0: 1, 1: 2, 2: 1}, 0, 1, []int{0, 1, 2}, false},
		{"back to the asker", map[int]int{0: 1, 1: 0}, 0, 0, []int{0, 1}, false},
		{"waits on no one", map[int]int{}, 4, 4, []int{4}, true},
	} {
		end, chain, ok := notice.Chain(tc.waits, tc.from)
		if end != tc.end || !slices.Equal(chain, tc.chain) || ok != tc.ok {
			t.Errorf("%s: %d %v %v, want %d %v %v", tc.name, end, chain, ok, tc.end, tc.chain, tc.ok)
		}
	}
}

// Four ranks time out in one call; rank 2 is stopped and says nothing.
// Each of the others learns whom the rest wait on, and the chain ends at 2.
func TestAskWaits(t *testing.T) {
	eps := mem.New(4)
	defer func() {
		for _, ep := range eps {
			ep.Close()
		}
	}()
	on := map[int]int{0: 3, 1: 0, 3: 2}
	got := make([]map[int]int, 4)
	var wg sync.WaitGroup
	for r, w := range on {
		wg.Go(func() { got[r] = notice.AskWaits(eps[r], tag, w, time.Second) })
	}
	wg.Wait()
	for r := range on {
		for q, w := range on {
			if got[r][q] != w {
				t.Errorf("rank %d heard %v, want %v", r, got[r], on)
			}
		}
		if end, _, ok := notice.Chain(got[r], r); end != 2 || !ok {
			t.Errorf("rank %d: the chain ends at %d (%v), want 2", r, end, ok)
		}
	}
}
