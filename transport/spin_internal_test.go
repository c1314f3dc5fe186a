package transport

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// The spinner's bookkeeping: a spin that runs out without credit pauses
// spinning, pauses double while spinning does not pay, a streak of
// successes resets them, and a paused or zero spinner polls just once.
func TestSpinnerAdapts(t *testing.T) {
	never := func() bool { return false }
	s := NewSpinner(time.Microsecond)
	if s.Wait(never) {
		t.Fatal("Wait reported ready")
	}
	if s.resume.Load() == 0 || time.Duration(s.pause.Load()) != spinPauseMin {
		t.Fatalf("after a spin that ran out: resume %d, pause %v; want a pause of %v", s.resume.Load(), time.Duration(s.pause.Load()), spinPauseMin)
	}

	// Paused: one poll, no spin.
	s.resume.Store(time.Now().Add(time.Hour).UnixNano())
	polls := 0
	if s.Wait(func() bool { polls++; return false }) || polls != 1 {
		t.Fatalf("paused spinner polled %d times", polls)
	}

	// The pause over, spinning resumes; running out again doubles it.
	s.resume.Store(1)
	s.Wait(never)
	if got := time.Duration(s.pause.Load()); got != 2*spinPauseMin {
		t.Fatalf("second pause %v, want %v", got, 2*spinPauseMin)
	}
	for range 10 {
		s.resume.Store(1)
		s.Wait(never)
	}
	if got := time.Duration(s.pause.Load()); got != spinPauseMax {
		t.Fatalf("pause %v after many misses, want the cap %v", got, spinPauseMax)
	}

	// A streak of spins that pay resets the pause.
	s.resume.Store(1)
	for range spinStreak {
		n := 0
		if !s.Wait(func() bool { n++; return n > 3 }) {
			t.Fatal("Wait gave up before its condition held")
		}
	}
	if s.pause.Load() != 0 || s.credit.Load() != spinStreak {
		t.Fatalf("after %d good spins: pause %v, credit %d", spinStreak, time.Duration(s.pause.Load()), s.credit.Load())
	}

	for _, z := range []*Spinner{nil, NewSpinner(0), NewSpinner(-1)} {
		polls := 0
		if z.Wait(func() bool { polls++; return false }) || polls != 1 {
			t.Fatalf("spinner %v polled %d times, want 1", z, polls)
		}
	}
}

// Begin and End: a transport that polls in its own way (transport/tcp)
// polls while polls pay, stops after polls that time out or lose
// their core, and tries again after pauses that double until polling has
// paid for a while.
func TestSpinnerBeginEnd(t *testing.T) {
	const spin = 50 * time.Microsecond
	s := NewSpinner(spin)
	now := time.Unix(1000, 0)
	polls := func(at time.Time) bool {
		t.Helper()
		switch d := s.Begin(at); d {
		case 0:
			return false
		case spin:
			return true
		default:
			t.Fatalf("poll of %v", d)
			return false
		}
	}
	for range spinStreak {
		if !polls(now) {
			t.Fatal("a fresh spinner does not poll")
		}
		s.End(now, true, false)
	}
	// With full credit, a poll that times out now and then is borne.
	var n int
	for n = 1; n < 10; n++ {
		if !polls(now) {
			break
		}
		s.End(now, false, false)
	}
	if n != 4 {
		t.Fatalf("polling stopped after %d polls that timed out, want 3", n-1)
	}
	// A pause, then a try, whose failure doubles the pause.
	pause := spinPauseMin
	for range 8 {
		if polls(now.Add(pause - time.Microsecond)) {
			t.Fatalf("polled into a pause of %v", pause)
		}
		now = now.Add(pause)
		if !polls(now) {
			t.Fatalf("no poll after a pause of %v", pause)
		}
		s.End(now, false, false)
		pause = min(2*pause, spinPauseMax)
	}
	if pause != spinPauseMax {
		t.Fatalf("pause %v, want %v", pause, spinPauseMax)
	}
	// A try that pays, then a poll that does not: the pause stays long.
	now = now.Add(spinPauseMax)
	polls(now)
	s.End(now, true, false)
	if !polls(now) {
		t.Fatal("no poll after one that paid")
	}
	s.End(now, false, false)
	if polls(now.Add(spinPauseMax - time.Microsecond)) {
		t.Fatalf("polled into a pause of %v", spinPauseMax)
	}
	now = now.Add(spinPauseMax)
	// Full credit again, then a poll that lost its core: polling stops at
	// once, for spinPauseMin.
	for range spinStreak {
		polls(now)
		s.End(now, true, false)
	}
	polls(now)
	s.End(now, false, true)
	if polls(now) {
		t.Fatal("polled right after losing the core")
	}
	if !polls(now.Add(spinPauseMin)) {
		t.Fatalf("no poll %v after losing the core", spinPauseMin)
	}
}

// Done made while Complete runs: every waiter wakes, Err says the result,
// and a request completes once.
func TestReqDoneRacesComplete(t *testing.T) {
	for range 200 {
		r := NewRequest()
		woke := make(chan error, 2)
		for range 2 {
			go func() {
				<-r.Done()
				woke <- r.Err()
			}()
		}
		won := make(chan bool, 2)
		for _, err := range []error{ErrClosed, ErrClosed} {
			go func() { won <- r.Complete(err) }()
		}
		if a, b := <-won, <-won; a == b {
			t.Fatalf("Complete won %v and %v: want exactly one", a, b)
		}
		for range 2 {
			if err := <-woke; err != ErrClosed {
				t.Fatalf("woken waiter saw %v", err)
			}
		}
		if r.Done() != closedChan {
			t.Fatal("a complete request's Done is not the shared closed channel")
		}
	}
}

// TestYieldSpinnerLetsGoroutinesRun: a yield spinner's wait, which gives
// its core to other threads, still lets the goroutine it waits for run
// on its own processor: with GOMAXPROCS 1 a wait that only yielded the
// core (sched_yield) would hold the one P to its end.
func TestYieldSpinnerLetsGoroutinesRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := NewYieldSpinner(2 * time.Second)
	if !s.Yields() || NewSpinner(time.Second).Yields() {
		t.Fatal("Yields does not tell the two policies apart")
	}
	var done atomic.Bool
	polls := 0
	ready := func() bool { polls++; return done.Load() }
	go done.Store(true)
	if !s.Wait(ready) {
		t.Fatal("the wait ended without seeing the goroutine run")
	}
	// Gosched runs it at the first pass; without, only the runtime's
	// preemption would, 10 ms and thousands of polls later.
	if polls > 100 {
		t.Fatalf("the goroutine ran only after %d polls: the wait held the processor", polls)
	}
}

// TestYieldSpinnerKeepsPolling: a yield spinner that loses its core (a
// gap between polls) goes on polling, where a plain spinner stops.
func TestYieldSpinnerKeepsPolling(t *testing.T) {
	s := NewYieldSpinner(time.Second)
	polls := 0
	ready := func() bool {
		polls++
		if polls == 8 {
			time.Sleep(2 * SpinGap) // as if another thread had the core
		}
		return polls == 50
	}
	if !s.Wait(ready) {
		t.Fatalf("the wait stopped after %d polls", polls)
	}
	if s.resume.Load() != 0 {
		t.Fatal("the lost core paused spinning")
	}
}
