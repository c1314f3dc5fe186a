package sim

import (
	"context"
	"math/bits"
	"os"
	"sync/atomic"
	"testing"

	"github.com/goccl/goccl/algo"
)

// dialCount is algo.Peers that counts the store reads a rank of goccl's
// Init would make: a send to a rank whose address it does not hold (its
// own, its right neighbour's, or one the exchange brought) and that has
// not first sent to it (the reply goes over that rank's link).
type dialCount struct {
	algo.Peers
	known, heard map[int]bool
	gets         int
}

func (p *dialCount) Isend(to int, b []byte) algo.Request {
	if !p.known[to] && !p.heard[to] {
		p.gets++
		p.known[to] = true
	}
	return p.Peers.Isend(to, b)
}

func (p *dialCount) Irecv(from int, b []byte) algo.Request {
	p.heard[from] = true // the algorithm waits on it before replying
	return p.Peers.Irecv(from, b)
}

// TestLazyInitLinks counts what goccl's Init costs under lazy links
// (links.go, transport/tcp/lazy.go) at scale: each rank links its right
// neighbour, then runs the Bruck allgather of addresses that says hello
// upward (algo.BruckAllGatherAhead). Links: the pairs that exchanged a
// message. Store requests: each rank's Set of its address, its liveness
// key, its read of the right neighbour's address, and one Get for any
// other peer it would dial without its address (none).
// 1,024 ranks always, 16,384 with GOCCL_SIM_FULL=1.
func TestLazyInitLinks(t *testing.T) {
	ns := []int{1024}
	if os.Getenv("GOCCL_SIM_FULL") != "" {
		ns = append(ns, 16384)
	}
	for _, n := range ns {
		var gets atomic.Int64
		cfg := Config{Ranks: n, ElemSize: 1, Topology: DefaultTopology(n / 8), Gamma: DefaultGamma, SizeOnly: true}
		res, err := Run(context.Background(), cfg, func(ctx context.Context, p algo.Peers) error {
			r := p.Rank()
			cp := &dialCount{Peers: p, known: map[int]bool{r: true, (r + 1) % n: true}, heard: map[int]bool{}}
			rr := cp.Irecv((r-1+n)%n, nil)
			sr := cp.Isend((r+1)%n, nil)
			if err := rr.Wait(ctx); err != nil {
				return err
			}
			if err := sr.Wait(ctx); err != nil {
				return err
			}
			// One byte a slot: the links do not depend on the slot's size.
			counts := make([]int, n)
			for i := range counts {
				counts[i] = 1
			}
			learned := func(first, m int) {
				for i := range m {
					cp.known[(first+i)%n] = true
				}
			}
			if err := algo.BruckAllGatherAhead(ctx, cp, make([]byte, n), counts, learned); err != nil {
				return err
			}
			gets.Add(1 + int64(cp.gets))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		logn := bits.Len(uint(n - 1))
		requests := 2*int64(n) + gets.Load()
		t.Logf("lazy Init, %d ranks: %d links in all, at most %d a rank (eager: %d and %d); %d store requests (eager: %d address reads alone); virtual %.3f ms",
			n, res.Links, res.MaxLinks, int64(n)*int64(n-1)/2, n-1, requests, int64(n)*int64(n-1)/2, res.Time*1e3)
		if res.MaxLinks > 2*logn+2 {
			t.Errorf("%d ranks: a rank holds %d links after Init, want at most 2·⌈log2 n⌉+2 = %d", n, res.MaxLinks, 2*logn+2)
		}
		if requests > 3*int64(n) {
			t.Errorf("%d ranks: %d store requests, want at most 3n = %d", n, requests, 3*n)
		}
	}
}
