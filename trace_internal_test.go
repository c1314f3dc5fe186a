package goccl

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRecorderCall is the flight recorder's own cost for one call
// made in place that completes: issue (as started), end (BENCHMARKS.md).
func BenchmarkRecorderCall(b *testing.B) {
	r := newRecorder(func(string) string { return "" })
	c := &Comm{shared: &shared{}}
	k := &call{c: c, op: "all_reduce", p: &peers{tag: 5}, count: 2, root: -1}
	k.ctx.init(context.Background(), time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		k.traceID = 0
		r.issue(k, false, true)
		r.end(k, nil)
	}
}
