package transport

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Spinner is a spin-then-park policy for the waiters of one endpoint: a
// waiter polls for its completion, yielding the processor between polls
// (runtime.Gosched), for at most the spin time before it parks. A short
// wait then costs no goroutine wake-up on either side, and yielding lets
// the goroutine that will complete it run on this processor when there
// are more goroutines than processors.
//
// It adapts, as transport/tcp's socket poll does: polls that succeed earn
// credit (up to spinStreak); one that runs out of time costs half of it,
// and one that finds it lost its thread (a gap of spinGap between two
// polls: the machine has more runnable threads than cores) costs all of
// it. Without credit nobody spins for a pause of 1 to 16 ms, doubling
// each time spinning stops without having earned full credit since. The
// state is shared by all the endpoint's waiters and kept with atomics;
// concurrent waiters may update it loosely, which only shifts a pause.
type Spinner struct {
	max    time.Duration
	credit atomic.Int32
	pause  atomic.Int64 // ns, the last pause
	resume atomic.Int64 // UnixNano before which nobody spins; 0: spinning
}

// Limits of Spinner's adaptation.
const (
	spinStreak   = 8
	spinGap      = 200 * time.Microsecond
	spinPauseMin = time.Millisecond
	spinPauseMax = 16 * time.Millisecond
)

// NewSpinner returns a policy that spins for at most d per wait; d <= 0
// never spins.
func NewSpinner(d time.Duration) *Spinner { return &Spinner{max: d} }

// Max is the longest one wait spins.
func (s *Spinner) Max() time.Duration { return s.max }

// Wait polls ready until it returns true or the spin time is over, and
// reports ready's last answer. It never blocks.
func (s *Spinner) Wait(ready func() bool) bool {
	if ready() {
		return true
	}
	if s == nil || s.max <= 0 {
		return false
	}
	now := time.Now()
	if r := s.resume.Load(); r != 0 {
		if now.UnixNano() < r {
			return false
		}
		s.resume.Store(0)
	}
	end, last := now.Add(s.max), now
	for i := 1; ; i++ {
		runtime.Gosched()
		if ready() {
			if c := s.credit.Add(1); c >= spinStreak {
				s.credit.Store(spinStreak)
				s.pause.Store(0)
			}
			return true
		}
		if i&3 != 0 {
			continue
		}
		t := time.Now()
		if t.Sub(last) > spinGap {
			s.stop(t)
			return false
		}
		if t.After(end) {
			if s.credit.Add(-spinStreak/2) < 0 {
				s.stop(t)
			}
			return false
		}
		last = t
	}
}

// stop pauses spinning.
func (s *Spinner) stop(now time.Time) {
	s.credit.Store(0)
	p := min(max(2*time.Duration(s.pause.Load()), spinPauseMin), spinPauseMax)
	s.pause.Store(int64(p))
	s.resume.Store(now.Add(p).UnixNano())
}
