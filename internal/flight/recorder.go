package flight

import (
	"runtime"
	"strings"
	"sync"

	"github.com/goccl/goccl/internal/clock"
	"github.com/goccl/goccl/reduceop"
)

// DefaultBuffer is how many recent calls a Recorder keeps by default.
const DefaultBuffer = 256

// Recorder is the flight recorder's ring of a communicator's recent
// calls. Slots are reused in place: no allocation per call.
//
// It has no lock of its own: its owner orders a call and records it in
// one critical section, under the mutex it gives New (the methods named
// ...Locked expect it held; the others take it). Its slots are plain
// fields, the entry is built at dump time, and its times are
// internal/clock Stamps, converted at dump time: a call that succeeds
// reads one clock, its start.
type Recorder struct {
	mu    *sync.Mutex
	slots []slot
	n     uint64 // calls recorded
	next  int    // the slot the next call takes: n mod len(slots), kept without a division
	// callers: record the user's function; walking the stack costs
	// 0.1-0.3 us a call.
	callers bool
}

// slot is one call. It holds no more pointers than it must (the op and
// algorithm names, the call's Waiter while it runs): the ring is
// rewritten on every call, and with the garbage collector running,
// copying a whole Entry into it (nine pointer words, times included) went
// through the bulk write barrier, which cost an 8-byte allreduce more
// than the recorder's own work.
type slot struct {
	id      uint64 // n+1 of the call that owns the slot (0: empty)
	w       Waiter // while the call is in flight or failed: whom it waits on (holds no user buffer)
	op      string
	algo    string
	err     string // a failed call's error
	group   uint64
	seq     uint64
	count   int64
	root    int
	dt      reduceop.DType
	redop   reduceop.Op
	state   uint8
	issued  clock.Stamp // 0: not known
	started clock.Stamp
	ended   clock.Stamp
	callers [6]uintptr
}

// The slot states, as Entry names them.
const (
	stIssued uint8 = iota
	stStarted
	stDone
	stFailed
)

var stateNames = [...]string{stIssued: Issued, stStarted: Started, stDone: Done, stFailed: Failed}

// Waiter is what a call in flight tells a dump about itself.
type Waiter interface {
	// WaitingOn is the group rank the call waits on, or -1.
	WaitingOn() int
	// GroupRanks is the world ranks of the call's group, nil for the
	// world.
	GroupRanks() []int
}

// Call is what the recorder keeps of a call when it is issued.
type Call struct {
	Waiter       Waiter
	Op, Algo     string
	Group, Seq   uint64
	Count        int64 // -1 where ranks may differ
	Root         int   // -1: none
	DType        reduceop.DType
	RedOp        reduceop.Op
	Issued       clock.Stamp // 0: not known yet
	AlreadyStart bool        // the call runs from Issued on
}

// Ticket is a call's place in the ring; its zero value is no place.
type Ticket struct {
	id   uint64
	slot int
}

// New returns a recorder of size calls under mu, recording the callers'
// functions if callers; nil for size 0 (the recorder off). A nil
// Recorder's methods do nothing.
func New(size int, mu *sync.Mutex, callers bool) *Recorder {
	if size <= 0 {
		return nil
	}
	return &Recorder{mu: mu, slots: make([]slot, size), callers: callers}
}

// Capacity is the ring's size.
func (r *Recorder) Capacity() int {
	if r == nil {
		return 0
	}
	return len(r.slots)
}

// Callers fills pcs with the program counters of the goroutine's stack,
// from skip frames above the caller of Callers (0: that caller), where
// the recorder keeps callers.
func (r *Recorder) Callers(skip int, pcs *[6]uintptr) {
	if r != nil && r.callers {
		runtime.Callers(skip+2, pcs[:])
	}
}

// IssueLocked records a call that has just been ordered, with its
// callers (Callers), and sets t to its place; r's mutex is held.
func (r *Recorder) IssueLocked(t *Ticket, c *Call, pcs *[6]uintptr) {
	if r == nil {
		return
	}
	r.n++
	t.id, t.slot = r.n, r.next
	if r.next++; r.next == len(r.slots) {
		r.next = 0
	}
	s := &r.slots[t.slot]
	s.id, s.w = r.n, c.Waiter
	if r.callers {
		s.callers = *pcs
	}
	if s.op != c.Op { // the same few names, again and again: skip the write barrier
		s.op = c.Op
	}
	if s.algo != c.Algo {
		s.algo = c.Algo
	}
	if s.err != "" {
		s.err = ""
	}
	s.group, s.seq, s.count, s.root = c.Group, c.Seq, c.Count, c.Root
	s.dt, s.redop, s.state = c.DType, c.RedOp, stIssued
	s.issued, s.started, s.ended = c.Issued, 0, 0
	if c.AlreadyStart {
		s.state, s.started = stStarted, c.Issued
	}
}

// at returns t's slot if the ring has not reused it; r's mutex is held.
func (r *Recorder) at(t Ticket) *slot {
	if t.id == 0 {
		return nil
	}
	s := &r.slots[t.slot]
	if s.id != t.id {
		return nil
	}
	return s
}

// Start records that the call at t runs since now (0: not known).
func (r *Recorder) Start(t Ticket, now clock.Stamp) {
	if r == nil || t.id == 0 {
		return
	}
	r.mu.Lock()
	if s := r.at(t); s != nil {
		s.state = stStarted
		s.learnStart(now)
	}
	r.mu.Unlock()
}

// learnStart fills in a start not yet known; r's mutex is held.
func (s *slot) learnStart(now clock.Stamp) {
	if s.started == 0 && now != 0 {
		s.started = now
		if s.issued == 0 {
			s.issued = now
		}
	}
}

// End records how the call at t, started at started, ended. Only a
// failure reads the clock: a call that completed is known by its start.
func (r *Recorder) End(t Ticket, started clock.Stamp, err error) {
	if r == nil || t.id == 0 {
		return
	}
	var now clock.Stamp
	var msg string
	if err != nil {
		now, msg = clock.Now(), err.Error()
	}
	r.mu.Lock()
	r.EndLocked(t, started, err, now, msg)
	r.mu.Unlock()
}

// EndLocked is End's record, with the time and message of a failure;
// r's mutex is held.
func (r *Recorder) EndLocked(t Ticket, started clock.Stamp, err error, now clock.Stamp, msg string) {
	if r == nil || t.id == 0 {
		return
	}
	if s := r.at(t); s != nil {
		s.learnStart(started)
		s.state = stDone
		if err != nil {
			// Keep the waiter: whom it waited on is what a dump is read for.
			s.state, s.err, s.ended = stFailed, msg, now
		} else {
			s.w = nil
		}
	}
}

// Entries returns the ring's calls, oldest first, with the peer each
// call in flight waits on and its caller's function.
func (r *Recorder) Entries() []Entry {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Entry
	sc := clock.Calibrate()
	size := uint64(len(r.slots))
	first := uint64(1)
	if r.n > size {
		first = r.n - size + 1
	}
	for id := first; id <= r.n; id++ {
		s := &r.slots[(id-1)%size]
		if s.id != id {
			continue
		}
		e := Entry{
			Group: s.group, Seq: s.seq, Op: s.op, Count: s.count, Root: s.root, Algo: s.algo,
			State: stateNames[s.state], Error: s.err,
			Issued: sc.Time(s.issued), Started: sc.Time(s.started), Ended: sc.Time(s.ended),
		}
		if s.dt.Valid() {
			e.DType = s.dt.String()
		}
		if s.redop != 0 {
			e.RedOp = s.redop.String()
		}
		if r.callers {
			e.Caller = callerOf(s.callers[:])
		}
		if s.w != nil {
			e.Ranks = s.w.GroupRanks()
			if w := s.w.WaitingOn(); w >= 0 && (e.State == Started || e.State == Failed) {
				e.WaitingOn = []int{w}
			}
		}
		out = append(out, e)
	}
	return out
}

// callerOf names the first function outside goccl's own packages.
func callerOf(pcs []uintptr) string {
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "github.com/goccl/goccl.") &&
			!strings.HasPrefix(f.Function, "github.com/goccl/goccl/onebit.") &&
			!strings.HasPrefix(f.Function, "github.com/goccl/goccl/ckpt.") {
			return f.Function
		}
		if !more {
			return ""
		}
	}
}
