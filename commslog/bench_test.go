package commslog

import (
	"testing"
	"time"
)

// BenchmarkDisabled is the cost a communicator pays per collective for the
// logger when logging is off: one Profiling call.
func BenchmarkDisabled(b *testing.B) {
	for _, bc := range []struct {
		name string
		l    *Logger
	}{
		{"nil", nil},
		{"off", New(Config{}, 0, 4)},
		{"prof_ops_miss", New(Config{Enabled: true, ProfOps: []string{Broadcast}}, 0, 4)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if bc.l.Profiling(AllReduce) {
					bc.l.Append(Record{Op: AllReduce})
				}
			}
		})
	}
}

// BenchmarkEnabled is the cost of timing and keeping one record.
func BenchmarkEnabled(b *testing.B) {
	l := New(Config{Enabled: true}, 0, 4)
	for b.Loop() {
		if l.Profiling(AllReduce) {
			start := time.Now()
			l.Append(Record{Op: AllReduce, Bytes: 1 << 20, Start: start, Latency: time.Since(start)})
		}
		if l.Len() >= 1<<16 {
			l.Reset()
		}
	}
}

var sink []byte

// BenchmarkCopy64K compares a 64 KiB copy, standing in for a small
// collective, with and without the logging a communicator wraps around it.
func BenchmarkCopy64K(b *testing.B) {
	src := make([]byte, 64<<10)
	dst := make([]byte, 64<<10)
	for _, bc := range []struct {
		name string
		l    *Logger
	}{{"no_logger", nil}, {"off", New(Config{}, 0, 4)}, {"on", New(Config{Enabled: true}, 0, 4)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				var start time.Time
				on := bc.l.Profiling(AllReduce)
				if on {
					start = time.Now()
				}
				copy(dst, src)
				if on {
					bc.l.Append(Record{Op: AllReduce, Bytes: int64(len(src)), Start: start, Latency: time.Since(start)})
					if bc.l.Len() >= 1<<16 {
						bc.l.Reset()
					}
				}
			}
			sink = dst
		})
	}
}
