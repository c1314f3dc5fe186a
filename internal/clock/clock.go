package clock

import (
	"os"
	"strings"
	"time"
)

// A Stamp is a reading of Now; 0 is none.
type Stamp int64

var (
	// counter: Now reads the time-stamp counter.
	counter bool
	// base and baseStamp are a time and the Stamp read with it, when the
	// package started: what Calibrate measures from.
	base      time.Time
	baseStamp Stamp
)

func init() { start(haveCounter && kernelCounts()) }

// start sets the clock up, on the counter or not.
func start(onCounter bool) {
	counter = onCounter
	if counter {
		baseStamp, base = pair()
	} else {
		baseStamp, base = 1, time.Now()
	}
}

// Now reads the clock.
func Now() Stamp {
	if counter {
		return Stamp(ticks())
	}
	return Stamp(time.Since(base)) + 1
}

// kernelCounts reports whether the kernel's clock runs on the time-stamp
// counter: Linux uses it only once it has checked that the counter ticks
// at a constant rate, in step on every CPU.
func kernelCounts() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
}

// pair reads the counter and the time together: the counter before and
// after time.Now, the Stamp the middle of the two, in the tightest of a
// few tries (a try that the scheduler cut in two is wide).
func pair() (Stamp, time.Time) {
	var best Stamp
	var when time.Time
	width := int64(-1)
	for range 5 {
		a := ticks()
		now := time.Now()
		b := ticks()
		if width < 0 || b-a < width {
			best, when, width = Stamp(a+(b-a)/2), now, b-a
		}
	}
	return best, when
}

// A Scale turns Stamps into times.
type Scale struct {
	perTick float64 // nanoseconds per tick
}

// Calibrate returns the Scale of the clock as it has run since the
// process started. Its error on a Stamp is at most that of reading a Stamp
// and a time together (tens of nanoseconds), however soon it is called.
func Calibrate() Scale {
	if !counter {
		return Scale{perTick: 1}
	}
	s, now := pair()
	if s <= baseStamp {
		return Scale{} // no tick yet: every Stamp is base
	}
	return Scale{perTick: float64(now.Sub(base)) / float64(s-baseStamp)}
}

// Time is the time s was read; the zero Time for no Stamp.
func (sc Scale) Time(s Stamp) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return base.Add(time.Duration(float64(s-baseStamp) * sc.perTick))
}
