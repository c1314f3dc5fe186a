package commslog

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestStartStopProfiling follows DeepSpeed's start_profiling_comms,
// stop_profiling_comms, start_profiling_op and stop_profiling_op.
func TestStartStopProfiling(t *testing.T) {
	l := New(Config{Enabled: true}, 0, 2) // every op
	check := func(step string, all bool, ops []string, yes, no []string) {
		t.Helper()
		a, o := l.Profiled()
		if a != all || !slices.Equal(o, ops) {
			t.Errorf("%s: Profiled() = %v, %q; want %v, %q", step, a, o, all, ops)
		}
		for _, op := range yes {
			if !l.Profiling(op) {
				t.Errorf("%s: %s not timed", step, op)
			}
		}
		for _, op := range no {
			if l.Profiling(op) {
				t.Errorf("%s: %s timed", step, op)
			}
		}
	}
	check("new", true, nil, []string{AllReduce, Barrier}, nil)
	l.StopProfiling()
	check("stop", false, nil, nil, []string{AllReduce, Barrier})
	l.Append(Record{Op: AllReduce, Latency: time.Millisecond})
	if l.Len() != 0 {
		t.Error("kept a record while stopped")
	}
	l.StartProfiling(AllReduce, Broadcast, AllReduce)
	check("start ops", false, []string{AllReduce, Broadcast}, []string{AllReduce, Broadcast}, []string{Barrier})
	l.StopProfiling(Broadcast, "never_started")
	check("stop op", false, []string{AllReduce}, []string{AllReduce}, []string{Broadcast})
	l.StartProfiling()
	check("start all", true, []string{AllReduce}, []string{AllReduce, Broadcast, Barrier}, nil)
	l.StopProfiling(AllReduce) // prof_all still times it, as in DeepSpeed
	check("stop op under all", true, []string{}, []string{AllReduce}, nil)
	if c := l.Config(); c.ProfAll || len(c.ProfOps) != 0 {
		t.Errorf("Config changed: %+v", c)
	}

	// A disabled or nil logger stays off.
	d := New(Config{}, 0, 2)
	d.StartProfiling()
	var nl *Logger
	nl.StartProfiling(AllReduce)
	nl.StopProfiling()
	if d.Profiling(AllReduce) || nl.Profiling(AllReduce) {
		t.Error("StartProfiling turned on a disabled logger")
	}
	if a, o := nl.Profiled(); a || o != nil {
		t.Errorf("nil Profiled = %v, %v", a, o)
	}
}

// TestStartStopProfilingConcurrent runs StartProfiling and StopProfiling
// against Append and Records (go test -race).
func TestStartStopProfilingConcurrent(t *testing.T) {
	l := New(Config{Enabled: true, ProfOps: []string{Barrier}}, 0, 4)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if l.Profiling(AllReduce) {
					l.Append(Record{Op: AllReduce, Bytes: 8, Latency: time.Microsecond})
				}
				l.Append(Record{Op: Barrier, Latency: time.Microsecond})
				_ = l.Len()
			}
		}()
	}
	for i := range 500 {
		switch i % 4 {
		case 0:
			l.StartProfiling()
		case 1:
			l.StopProfiling()
		case 2:
			l.StartProfiling(AllReduce)
		case 3:
			l.StopProfiling(AllReduce)
		}
		l.Profiled()
	}
	close(stop)
	wg.Wait()
	if a, ops := l.Profiled(); a || !slices.Equal(ops, []string{Barrier}) {
		t.Errorf("end state %v %q", a, ops)
	}
	for _, r := range l.Records() {
		if r.Op != AllReduce && r.Op != Barrier {
			t.Errorf("record %+v", r)
		}
	}
}

func TestProfOpsOnly(t *testing.T) {
	l := New(Config{Enabled: true, ProfOpsOnly: true}, 0, 2)
	if l.Profiling(AllReduce) {
		t.Error("ProfOpsOnly with no ops times all_reduce")
	}
	l = New(Config{Enabled: true, ProfOpsOnly: true, ProfOps: []string{Barrier}}, 0, 2)
	if l.Profiling(AllReduce) || !l.Profiling(Barrier) {
		t.Error("ProfOpsOnly with ops: wrong set")
	}
	l = New(Config{Enabled: true, ProfOpsOnly: true, ProfAll: true}, 0, 2)
	if !l.Profiling(AllReduce) {
		t.Error("ProfAll does not override ProfOpsOnly")
	}
}
