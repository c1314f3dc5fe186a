package goccl

import (
	"context"
	"sync"
	"testing"
	"time"
)

// BenchmarkRecorderCall is the flight recorder's own cost for one call
// made in place that completes: its issue (as started) and its end, each
// in the critical section that the call's ordering and finishing share
// (BENCHMARKS.md).
func BenchmarkRecorderCall(b *testing.B) {
	var mu sync.Mutex
	c := &Comm{shared: &shared{flight: newRecorder(func(string) string { return "" }, &mu)}}
	r := c.shared.flight
	k := new(call)
	k.c, k.op, k.p, k.count, k.root = c, "all_reduce", new(peers), 2, -1
	k.p.c, k.p.tag = c, 5
	k.ctx.init(context.Background(), time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		var pcs [6]uintptr
		r.Callers(1, &pcs)
		mu.Lock()
		k.issueLocked(k.started, true, &pcs)
		mu.Unlock()
		mu.Lock()
		r.EndLocked(k.trace, k.started, nil, 0, "")
		mu.Unlock()
	}
}
