package algo_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
)

// reach is algo.Peers that checks BruckAllGatherAhead's promise: a rank
// sends only to a rank whose block it holds (it can reach it) or to one
// that has sent to it before (over the link that one made).
type reach struct {
	algo.Peers
	known  func(q int) bool
	mu     *sync.Mutex
	linked map[[2]int]bool // {a, b}: b has sent to a
	err    *error
}

func (p *reach) Isend(to int, b []byte) algo.Request {
	me := p.Rank()
	p.mu.Lock()
	if !p.known(to) && !p.linked[[2]int{me, to}] && *p.err == nil {
		*p.err = fmt.Errorf("rank %d sends to rank %d, which it neither knows nor has heard from", me, to)
	}
	p.linked[[2]int{to, me}] = true
	p.mu.Unlock()
	return p.Peers.Isend(to, b)
}

func TestBruckAllGatherAhead(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 33} {
		for _, c := range []int{0, 1, 3} {
			counts := make([]int, n)
			for i := range counts {
				counts[i] = c + i%2 // unequal blocks
			}
			off := algo.Offsets(counts, 8)
			want := make([]int64, off[n]/8)
			for q := range n {
				for i := off[q] / 8; i < off[q+1]/8; i++ {
					want[i] = int64(1000*q + i)
				}
			}
			var mu sync.Mutex
			linked := map[[2]int]bool{}
			var reachErr error
			out := make([][]int64, n)
			err := algotest.Run(n, 8, nil, func(ctx context.Context, p algo.Peers) error {
				r := p.Rank()
				buf := make([]byte, off[n])
				have := make([]bool, n)
				for _, q := range []int{r, (r + 1) % n} {
					copy(buf[off[q]:off[q+1]], algotest.Int64Bytes(want[off[q]/8:off[q+1]/8]))
					have[q] = true
				}
				var hmu sync.Mutex
				rp := &reach{Peers: p, mu: &mu, linked: linked, err: &reachErr, known: func(q int) bool {
					hmu.Lock()
					defer hmu.Unlock()
					return have[q]
				}}
				err := algo.BruckAllGatherAhead(ctx, rp, buf, counts, func(first, m int) {
					hmu.Lock()
					defer hmu.Unlock()
					for i := range m {
						have[(first+i)%n] = true
					}
				})
				out[r] = algotest.Int64s(buf)
				if err == nil && slices.Contains(have, false) {
					err = fmt.Errorf("rank %d: learned of %v only", r, have)
				}
				return err
			})
			if err != nil {
				t.Fatalf("n=%d c=%d: %v", n, c, err)
			}
			if reachErr != nil {
				t.Fatalf("n=%d c=%d: %v", n, c, reachErr)
			}
			for r := range n {
				if !slices.Equal(out[r], want) {
					t.Fatalf("n=%d c=%d rank %d: got %v, want %v", n, c, r, out[r], want)
				}
			}
		}
	}
}
