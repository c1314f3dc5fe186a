package goccl

import (
	"testing"
	"time"
)

// BenchmarkRecorderCall is the flight recorder's own cost for one call
// that completes: issue, start, end (BENCHMARKS.md).
func BenchmarkRecorderCall(b *testing.B) {
	r := newRecorder(func(string) string { return "" })
	c := &Comm{shared: &shared{}}
	k := &call{c: c, op: "all_reduce", p: &peers{tag: 5}, count: 2, root: -1}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		k.traceID = 0
		r.issue(k, false)
		r.start(k, now)
		r.end(k, nil)
	}
}
