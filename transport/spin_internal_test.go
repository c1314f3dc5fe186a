package transport

import (
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
