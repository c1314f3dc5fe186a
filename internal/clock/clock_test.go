package clock

import (
	"testing"
	"time"
)

// Both ways of reading the clock, wherever the test runs: the counter
// where this machine offers it, and the monotonic clock.
func modes(t *testing.T) map[string]bool {
	t.Cleanup(func() { start(haveCounter && kernelCounts()) })
	m := map[string]bool{"monotonic": false}
	if haveCounter && kernelCounts() {
		m["counter"] = true
	}
	return m
}

func TestStampsConvertToTheirTime(t *testing.T) {
	for name, onCounter := range modes(t) {
		t.Run(name, func(t *testing.T) {
			start(onCounter)
			// Read a Stamp between two times, right after the start and
			// once the clock has run a while: its time falls between
			// them, up to the conversion's error (tens of nanoseconds,
			// whatever the load: the reads are in this order).
			const tol = 100 * time.Microsecond
			for _, wait := range []time.Duration{0, 50 * time.Millisecond} {
				time.Sleep(wait)
				before := time.Now()
				s := Now()
				after := time.Now()
				time.Sleep(wait)
				got := Calibrate().Time(s)
				if got.Before(before.Add(-tol)) || got.After(after.Add(tol)) {
					t.Errorf("after %v: the Stamp read between %v and %v converts to %v",
						wait, before.Format(time.StampNano), after.Format(time.StampNano), got.Format(time.StampNano))
				}
			}
		})
	}
}

func TestStampsAdvance(t *testing.T) {
	for name, onCounter := range modes(t) {
		t.Run(name, func(t *testing.T) {
			start(onCounter)
			a := Now()
			time.Sleep(time.Millisecond)
			b := Now()
			if a == 0 || b <= a {
				t.Fatalf("Now read %d, then %d a millisecond later", a, b)
			}
			sc := Calibrate()
			if d := sc.Time(b).Sub(sc.Time(a)); d < time.Millisecond {
				t.Errorf("two Stamps a millisecond apart convert to times %v apart", d)
			}
		})
	}
}

func TestNoStampIsTheZeroTime(t *testing.T) {
	if got := Calibrate().Time(0); !got.IsZero() {
		t.Errorf("Time(0) = %v, want the zero Time", got)
	}
}

var sink Stamp

// BenchmarkNow is the clock's cost, beside BenchmarkTimeSince's: the
// flight recorder reads one per call (BENCHMARKS.md).
func BenchmarkNow(b *testing.B) {
	for b.Loop() {
		sink += Now()
	}
}

func BenchmarkTimeSince(b *testing.B) {
	for b.Loop() {
		sink += Stamp(time.Since(base))
	}
}
