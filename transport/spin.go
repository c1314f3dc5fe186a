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
// It adapts: polls that succeed earn credit (up to spinStreak); one that
// runs out of time costs half of it, and one that finds it lost its
// thread (a gap of SpinGap between two polls: the machine has more
// runnable threads than cores) costs all of it. Without credit nobody
// spins for a pause of 1 to 16 ms, doubling each time spinning stops
// without having earned full credit since. The state is kept with
// atomics, so that one Spinner can serve all of an endpoint's waiters;
// concurrent waiters may update it loosely, which only shifts a pause. A
// transport that polls in its own way (transport/tcp's socket reads)
// asks Begin how long it may poll and tells End how the poll went.
type Spinner struct {
	max    time.Duration
	yield  bool // NewYieldSpinner's
	credit atomic.Int32
	pause  atomic.Int64 // ns, the last pause
	resume atomic.Int64 // UnixNano before which nobody spins; 0: spinning
}

// SpinGap is the time between two looks at the clock in which a poll
// has lost its core to another thread: the poll stops.
const SpinGap = 200 * time.Microsecond

// Limits of Spinner's adaptation: spinStreak is the most credit, how many
// polls in a row must pay for the pause to start again from spinPauseMin.
const (
	spinStreak   = 8
	spinPauseMin = time.Millisecond
	spinPauseMax = 16 * time.Millisecond
)

// NewSpinner returns a policy that spins for at most d per wait; d <= 0
// never spins.
func NewSpinner(d time.Duration) *Spinner { return &Spinner{max: d} }

// NewYieldSpinner returns a policy for a host with more ranks than cores,
// as Open MPI's mpi_yield_when_idle: a wait polls for at most d, and
// between polls gives its core to any runnable thread of the machine
// (OSYield), not only to this process's goroutines; losing the core is
// then what it asked for, not a reason to stop. A rank whose peer is on
// the same core gets its answer when the peer has run, without a sleep
// and a wake-up on either side: a parked waiter costs its process a
// network-poller or futex wake-up and the Go runtime's monitor thread a
// tick every 20 us while the process comes and goes from idle, which four
// processes on two cores pay in turns.
func NewYieldSpinner(d time.Duration) *Spinner { return &Spinner{max: d, yield: true} }

// Yields reports whether s gives the core away between polls
// (NewYieldSpinner).
func (s *Spinner) Yields() bool { return s != nil && s.yield }

// Pass gives up the processor between two polls: to another goroutine,
// and with Yields then the core to any runnable thread of the machine.
// Both: a poller that only gave its core away would keep its P, and the
// goroutine of its own process that it waits for (the caller, a shm
// drainer) would wait for a P (a 64 KiB allreduce over shm took 10 ms).
func (s *Spinner) Pass() {
	runtime.Gosched()
	if s.Yields() {
		OSYield()
	}
}

// Max is the longest one wait spins.
func (s *Spinner) Max() time.Duration { return s.max }

// Begin returns how long a wait that starts at now may poll: Max, or 0
// while spinning is paused or where it never spins.
func (s *Spinner) Begin(now time.Time) time.Duration {
	if s == nil || s.max <= 0 {
		return 0
	}
	if r := s.resume.Load(); r != 0 {
		if now.UnixNano() < r {
			return 0
		}
		s.resume.Store(0)
	}
	return s.max
}

// End records how a poll that Begin allowed ended, at now: it got what it
// waited for, or it lost its core (a gap of SpinGap), or else its time ran
// out.
func (s *Spinner) End(now time.Time, got, preempted bool) {
	switch {
	case got:
		if c := s.credit.Add(1); c >= spinStreak {
			s.credit.Store(spinStreak)
			s.pause.Store(0)
		}
	case preempted:
		s.stop(now)
	default:
		if s.credit.Add(-spinStreak/2) < 0 {
			s.stop(now)
		}
	}
}

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
	if s.Begin(now) == 0 {
		return false
	}
	end, last := now.Add(s.max), now
	for i := 1; ; i++ {
		s.Pass()
		if ready() {
			s.End(last, true, false)
			return true
		}
		if i&3 != 0 {
			continue
		}
		t := time.Now()
		if gap, over := t.Sub(last) > SpinGap && !s.yield, t.After(end); gap || over {
			s.End(t, false, gap)
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
