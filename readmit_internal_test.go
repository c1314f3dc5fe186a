package goccl

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestReadmitTwice: a job that loses a rank, readmits a replacement, and
// then loses and readmits again forms both generations: the replacement
// of the second failure joins the generation the survivors meet in (the
// first replacement's rejoin once left the generation key at "0", which
// kept generation 1 from being recorded, and the second replacement then
// waited in generation 1 while the survivors met in generation 2).
func TestReadmitTwice(t *testing.T) {
	const size = 3
	comms, err := initRanks(t, size, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(comms[0].shared.rdv.Store().(interface{ Addr() string }).Addr())
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	for gen := 1; gen <= 2; gen++ {
		comms[2].Close() // rank 2 goes
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		next := make([]*Comm, size)
		errs := make([]error, size)
		var wg sync.WaitGroup
		for r := range size - 1 {
			wg.Go(func() { next[r], errs[r] = comms[r].Readmit(ctx) })
		}
		wg.Go(func() {
			next[2], errs[2] = Init(ctx, fakeEnv(nil), WithTransport("tcp"), WithTimeout(20*time.Second), WithRejoin(),
				WithEnv(Env{Rank: 2, Size: size, LocalRank: -1, LocalSize: -1, MasterAddr: "127.0.0.1", MasterPort: port, Source: "options"}))
		})
		wg.Wait()
		cancel()
		for _, c := range next {
			if c != nil {
				t.Cleanup(func() { c.Close() })
			}
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		for r, c := range next {
			if got := c.shared.rdv.Gen; got != gen {
				t.Errorf("generation %d: rank %d is in generation %d", gen, r, got)
			}
		}
		for r := range size {
			wg.Go(func() { errs[r] = next[r].Barrier(t.Context()) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("generation %d: barrier: %v", gen, err)
		}
		comms = next
	}
}
