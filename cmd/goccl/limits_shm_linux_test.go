//go:build linux

package main

import (
	"context"
	"testing"
	"time"
)

// The two roles of the shared-memory figures, as goroutines over one
// mapping: the measurer checks the bytes it copied out of the ring
// (a message of a slot and a half, so the ring wraps and the last slot is
// partial) and those it pulled by cross-memory attach (from its own
// process here), the exchange checks the sum both sides' values make, and
// it prints positive figures (cross-memory attach may be refused).
func TestLimitsSharedMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, mem, err := newShmSegment()
	if err != nil {
		t.Skip("no memfd here:", err)
	}
	defer f.Close()
	const n = shmSlot*shmSlots*2 + shmSlot/2
	answered := make(chan error, 1)
	go func() { answered <- shmAnswer(ctx, mem, n) }()
	fig, err := shmMeasure(ctx, mem, n, 2, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("answering side: %v", err)
	}
	if fig.copy <= 0 || fig.rtt <= 0 || fig.swap <= 0 || fig.cma < 0 || (fig.cma == 0) != (fig.cma2 == 0) {
		t.Fatalf("figures %+v", fig)
	}
	if fig.cma == 0 {
		t.Log("cross-memory attach refused here")
	}
	t.Logf("copy %.2f GB/s, round trip %.3f us, exchange %.3f us, cross-memory attach %.2f GB/s, both ways %.2f GB/s",
		fig.copy/1e9, fig.rtt*1e6, fig.swap*1e6, fig.cma/1e9, fig.cma2/1e9)
}
