package sim

import (
	"context"
	"math/bits"
	"os"
	"sync/atomic"
	"testing"

	"github.com/goccl/goccl/algo"
)

// sendTargets is algo.Peers that records whom this rank sends to.
type sendTargets struct {
	algo.Peers
	to map[int]bool
}

func (p *sendTargets) Isend(to int, b []byte) algo.Request {
	p.to[to] = true
	return p.Peers.Isend(to, b)
}

// TestLazyInitLinks counts what goccl's Init costs under lazy links
// (links.go, transport/tcp/lazy.go) at scale: each rank links its right
// neighbour, then runs the Bruck allgather of addresses. Links: the pairs
// that exchanged a message. Store requests: each rank's Set of its
// address, its liveness key, and one Get per rank it sends to (the book
// answers the rest). 1,024 ranks always, 16,384 with GOCCL_SIM_FULL=1.
func TestLazyInitLinks(t *testing.T) {
	ns := []int{1024}
	if os.Getenv("GOCCL_SIM_FULL") != "" {
		ns = append(ns, 16384)
	}
	for _, n := range ns {
		var gets atomic.Int64
		cfg := Config{Ranks: n, ElemSize: 1, Topology: DefaultTopology(n / 8), Gamma: DefaultGamma, SizeOnly: true}
		res, err := Run(context.Background(), cfg, func(ctx context.Context, p algo.Peers) error {
			cp := &sendTargets{Peers: p, to: map[int]bool{}}
			r := p.Rank()
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
			if err := algo.BruckAllGather(ctx, cp, make([]byte, n), counts); err != nil {
				return err
			}
			gets.Add(int64(len(cp.to)))
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
		if requests > int64(n)*int64(logn+3) {
			t.Errorf("%d ranks: %d store requests, want at most n(⌈log2 n⌉+3) = %d", n, requests, int64(n)*int64(logn+3))
		}
	}
}
