package flight_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/goccl/goccl/internal/clock"
	"github.com/goccl/goccl/internal/flight"
	"github.com/goccl/goccl/reduceop"
)

type waiter struct {
	on    int
	ranks []int
}

func (w *waiter) WaitingOn() int    { return w.on }
func (w *waiter) GroupRanks() []int { return w.ranks }

func issue(r *flight.Recorder, mu *sync.Mutex, seq uint64, w flight.Waiter, started bool) flight.Ticket {
	var t flight.Ticket
	var pcs [6]uintptr
	mu.Lock()
	r.IssueLocked(&t, &flight.Call{Waiter: w, Op: "all_reduce", Algo: "ring", Seq: seq, Count: 8, Root: -1,
		DType: reduceop.Float32, RedOp: reduceop.Sum, Issued: clock.Now(), AlreadyStart: started}, &pcs)
	mu.Unlock()
	return t
}

// The ring keeps the last calls, oldest first, in the states they
// reached, with whom a call in flight or failed waits on.
func TestRecorderRing(t *testing.T) {
	var mu sync.Mutex
	r := flight.New(3, &mu, false)
	w := &waiter{on: 2, ranks: []int{4, 5, 6}}
	done := issue(r, &mu, 1, w, true)
	r.End(done, 0, nil)
	failed := issue(r, &mu, 2, w, true)
	r.End(failed, 0, errors.New("peer closed"))
	running := issue(r, &mu, 3, w, false)
	r.Start(running, clock.Now())
	issued := issue(r, &mu, 4, &waiter{on: -1}, false) // pushes call 1 out
	_ = issued
	es := r.Entries()
	var seqs []uint64
	for _, e := range es {
		seqs = append(seqs, e.Seq)
	}
	if !slices.Equal(seqs, []uint64{2, 3, 4}) {
		t.Fatalf("seqs %v, want the last three", seqs)
	}
	want := []struct {
		state string
		wait  []int
		err   string
	}{{flight.Failed, []int{2}, "peer closed"}, {flight.Started, []int{2}, ""}, {flight.Issued, nil, ""}}
	for i, e := range es {
		if e.State != want[i].state || !slices.Equal(e.WaitingOn, want[i].wait) || e.Error != want[i].err {
			t.Errorf("call %d: %s waiting on %v, %q; want %+v", e.Seq, e.State, e.WaitingOn, e.Error, want[i])
		}
		if e.Op != "all_reduce" || e.DType != "float32" || e.RedOp != "sum" || e.Algo != "ring" || e.Root != -1 {
			t.Errorf("call %d: %+v", e.Seq, e)
		}
	}
	if !slices.Equal(es[0].Ranks, []int{4, 5, 6}) {
		t.Errorf("ranks %v", es[0].Ranks)
	}
	// A ticket whose slot was reused records nothing.
	r.End(done, 0, errors.New("late"))
	for _, e := range r.Entries() {
		if e.Error == "late" {
			t.Error("a reused slot took a stale ticket's end")
		}
	}
	if r.Capacity() != 3 {
		t.Errorf("capacity %d", r.Capacity())
	}
}

// A completed call drops its waiter; one that learns its start late
// gets it (a board call stamps its start after it is issued).
func TestRecorderLateStart(t *testing.T) {
	var mu sync.Mutex
	r := flight.New(4, &mu, false)
	var tk flight.Ticket
	var pcs [6]uintptr
	mu.Lock()
	r.IssueLocked(&tk, &flight.Call{Waiter: &waiter{on: 1}, Op: "barrier", AlreadyStart: true}, &pcs)
	mu.Unlock()
	if e := r.Entries()[0]; !e.Issued.IsZero() || !e.Started.IsZero() {
		t.Fatalf("a call issued at an unknown time: %+v", e)
	}
	r.End(tk, clock.Now(), nil)
	e := r.Entries()[0]
	if e.State != flight.Done || e.Started.IsZero() || e.Issued.IsZero() || e.WaitingOn != nil {
		t.Fatalf("%+v", e)
	}
}

// A nil recorder (GOCCL_TRACE_BUFFER=0) is off.
func TestRecorderOff(t *testing.T) {
	var mu sync.Mutex
	r := flight.New(0, &mu, false)
	if r != nil {
		t.Fatal("a recorder of no slots")
	}
	var tk flight.Ticket
	var pcs [6]uintptr
	r.Callers(0, &pcs)
	r.IssueLocked(&tk, &flight.Call{}, &pcs)
	r.Start(tk, 0)
	r.End(tk, 0, nil)
	if r.Entries() != nil || r.Capacity() != 0 {
		t.Fatal("an off recorder recorded")
	}
}

// With callers on, an entry names the first function outside goccl.
func TestRecorderCallers(t *testing.T) {
	var mu sync.Mutex
	r := flight.New(2, &mu, true)
	var tk flight.Ticket
	var pcs [6]uintptr
	r.Callers(0, &pcs)
	mu.Lock()
	r.IssueLocked(&tk, &flight.Call{Op: "barrier"}, &pcs)
	mu.Unlock()
	if c := r.Entries()[0].Caller; c != "github.com/goccl/goccl/internal/flight_test.TestRecorderCallers" {
		t.Errorf("caller %q", c)
	}
}
