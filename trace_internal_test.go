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
	r := newRecorder(func(string) string { return "" }, &mu)
	c := &Comm{shared: &shared{}}
	k := new(call)
	k.c, k.op, k.p, k.count, k.root = c, "all_reduce", new(peers), 2, -1
	k.p.tag = 5
	k.ctx.init(context.Background(), time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		k.traceID = 0
		var st traceStamp
		r.stamp(&st, k, false, true)
		mu.Lock()
		r.issueLocked(k, &st)
		mu.Unlock()
		mu.Lock()
		r.endLocked(k, nil, 0, "")
		mu.Unlock()
	}
}
