package goccl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/internal/clock"
	"github.com/goccl/goccl/internal/flight"
	"github.com/goccl/goccl/reduceop"
)

// The flight recorder, as PyTorch's: every communicator keeps a ring of
// its recent collectives (group, sequence number, op, count, dtype,
// reduction, root, algorithm, state, times, the caller's function, and
// for a call in flight the peer it waits on), and dumps it as JSON lines
// (internal/flight) when it is aborted (a timeout, a mismatch, a lost
// peer, a cancel), on SIGUSR1, and on demand (Comm.DumpTrace). With
// GOCCL_TRACE_DIR set, the dumps go to DIR/rank-R.jsonl, and
// `goccl trace analyze DIR` merges every rank's to say which rank never
// entered which call.
//
// GOCCL_TRACE_BUFFER=N sets the ring's size (DefaultTraceBuffer; 0 turns
// the recorder off). It has no lock of its own: a call is ordered and
// recorded in one critical section (shared.calls), and a call that
// succeeds is recorded as done and finished in another. Its slots are
// plain fields (the entry is built at dump time), and its times are
// internal/clock Stamps, converted at dump time: a successful call reads
// one, its start, which on amd64 is the processor's counter (12 ns, where
// the monotonic clock takes 33; BENCHMARKS.md). GOCCL_TRACE_CALLER=1 also
// records the user's function that made each call, for 0.1-0.3 us more.

// DefaultTraceBuffer is how many recent calls the flight recorder keeps.
const DefaultTraceBuffer = 256

// recorder is the ring. Slots are reused in place: no allocation per call.
type recorder struct {
	mu    *sync.Mutex // shared.calls
	slots []traceSlot
	n     uint64 // calls recorded
	next  int    // the slot the next call takes: n mod len(slots), kept without a division
	dir   string // GOCCL_TRACE_DIR, or ""
	// callers: record the user's function (GOCCL_TRACE_CALLER=1); off by
	// default, since walking the stack costs 0.1-0.3 us a call.
	callers bool
	stop    func() // ends the SIGUSR1 handler
	once    sync.Once
}

// traceSlot is one call. It holds no more pointers than it must (the op
// and algorithm names, the call's peers while it runs): the ring is
// rewritten on every call, and with the garbage collector running, copying
// a whole flight.Entry into it (nine pointer words, times included) went
// through the bulk write barrier, which cost the 8-byte allreduce more
// than the recorder's own work (BENCHMARKS.md). The entry is built at dump
// time.
type traceSlot struct {
	id      uint64 // n+1 of the call that owns the slot (0: empty)
	p       *peers // while the call is in flight or failed: whom it waits on (holds no user buffer)
	op      string
	algo    string
	err     string // a failed call's error
	group   uint64
	seq     uint64
	count   int64
	root    int
	dt      reduceop.DType
	redop   reduceop.Op
	state   traceState
	issued  clock.Stamp // 0: not known
	started clock.Stamp
	ended   clock.Stamp
	callers [6]uintptr
}

type traceState uint8

const (
	tsIssued traceState = iota
	tsStarted
	tsDone
	tsFailed
)

var traceStates = [...]string{tsIssued: flight.Issued, tsStarted: flight.Started, tsDone: flight.Done, tsFailed: flight.Failed}

// newRecorder returns the recorder GOCCL_TRACE_BUFFER and GOCCL_TRACE_DIR
// ask for, under mu, or nil when it is off.
func newRecorder(getenv func(string) string, mu *sync.Mutex) *recorder {
	size := DefaultTraceBuffer
	if v := getenv("GOCCL_TRACE_BUFFER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "goccl: GOCCL_TRACE_BUFFER=%q is not a count; using %d\n", v, size)
		} else {
			size = n
		}
	}
	if size == 0 {
		return nil
	}
	return &recorder{mu: mu, slots: make([]traceSlot, size), dir: getenv("GOCCL_TRACE_DIR"),
		callers: getenv("GOCCL_TRACE_CALLER") == "1"}
}

// watchSignal dumps c's record on SIGUSR1 while c is open, when the dumps
// have a directory to go to.
func (r *recorder) watchSignal(c *Comm) {
	if r == nil || r.dir == "" {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ch:
				c.dumpToDir("signal", nil)
			case <-done:
				return
			}
		}
	})
	r.stop = func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}

func (r *recorder) close() {
	if r != nil && r.stop != nil {
		r.once.Do(r.stop)
	}
}

// traceStamp is what issueLocked records beside the call's own fields,
// read before the lock is taken: the time and the callers.
type traceStamp struct {
	now     clock.Stamp // or 0
	started bool
	pcs     [6]uintptr
}

// stamp prepares the record of a call about to be ordered. An async one
// reads the clock here; one made in place that is about to run (started)
// is recorded as started at once, at the time exec stamped (none yet for
// a board call, which learns it later).
func (r *recorder) stamp(st *traceStamp, k *call, async, started bool) {
	if r == nil {
		return
	}
	if r.callers {
		runtime.Callers(3, st.pcs[:])
	}
	switch {
	case async:
		st.now = clock.Now()
	case started:
		st.now, st.started = k.started, true
	}
}

// issueLocked records a call that has just been ordered; r.mu is held
// (take orders and records a call in one critical section).
func (r *recorder) issueLocked(k *call, st *traceStamp) {
	if r == nil || k.p == nil {
		return
	}
	r.n++
	k.traceID, k.traceSlot = r.n, r.next
	if r.next++; r.next == len(r.slots) {
		r.next = 0
	}
	s := &r.slots[k.traceSlot]
	s.id, s.p = r.n, k.p
	if r.callers {
		s.callers = st.pcs
	}
	if s.op != k.op { // the same few names, again and again: skip the write barrier
		s.op = k.op
	}
	if s.algo != k.algo {
		s.algo = k.algo
	}
	if s.err != "" {
		s.err = ""
	}
	s.group, s.seq, s.count, s.root = k.c.id, uint64(k.p.tag)&(tagP2P-1), k.count, k.root
	s.dt, s.redop, s.state = k.dt, k.redop, tsIssued
	s.issued, s.started, s.ended = st.now, 0, 0
	if st.started {
		s.state, s.started = tsStarted, st.now
	}
}

// slot returns k's slot if the ring has not reused it; r.mu is held.
func (r *recorder) slot(k *call) *traceSlot {
	if k.traceID == 0 {
		return nil
	}
	s := &r.slots[k.traceSlot]
	if s.id != k.traceID {
		return nil
	}
	return s
}

// start records that k runs since now: an async call when exec takes it
// up, a board call made in place, recorded before it stamped its start,
// when it first waits (call.waits).
func (r *recorder) start(k *call, now clock.Stamp) {
	if r == nil || k.traceID == 0 {
		return
	}
	r.mu.Lock()
	if s := r.slot(k); s != nil {
		s.state = tsStarted
		s.learnStart(now)
	}
	r.mu.Unlock()
}

// learnStart fills in a start not yet known; r.mu is held.
func (s *traceSlot) learnStart(now clock.Stamp) {
	if s.started == 0 && now != 0 {
		s.started = now
		if s.issued == 0 {
			s.issued = now
		}
	}
}

// end records how k ended. Only a failure reads the clock: a call that
// completed is known by its start, and the hot path stays short.
func (r *recorder) end(k *call, err error) {
	if r == nil || k.traceID == 0 {
		return
	}
	var now clock.Stamp
	var msg string
	if err != nil {
		now, msg = clock.Now(), err.Error()
	}
	r.mu.Lock()
	r.endLocked(k, err, now, msg)
	r.mu.Unlock()
}

// endLocked is end's record, with the time and message of a failure;
// r.mu is held.
func (r *recorder) endLocked(k *call, err error, now clock.Stamp, msg string) {
	if r == nil || k.traceID == 0 {
		return
	}
	if s := r.slot(k); s != nil {
		s.learnStart(k.started)
		s.state = tsDone
		if err != nil {
			// Keep p: whom it waited on is what a dump is read for.
			s.state, s.err, s.ended = tsFailed, msg, now
		} else {
			s.p = nil
		}
	}
}

// entries returns the ring's calls, oldest first, with the peer each
// call in flight waits on and its caller's function.
func (r *recorder) entries() []flight.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []flight.Entry
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
		e := flight.Entry{
			Group: s.group, Seq: s.seq, Op: s.op, Count: s.count, Root: s.root, Algo: s.algo,
			State: traceStates[s.state], Error: s.err,
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
		if s.p != nil {
			if s.p.c.id != 0 {
				e.Ranks = s.p.c.ranks
			}
			if w := s.p.waitOn.Load(); w > 0 && (e.State == flight.Started || e.State == flight.Failed) {
				e.WaitingOn = []int{int(w - 1)}
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

// DumpTrace writes this rank's flight record (internal/flight's format:
// a header line, then one JSON line per recent call, oldest first) to w.
// It is an error when the recorder is off (GOCCL_TRACE_BUFFER=0).
func (c *Comm) DumpTrace(w io.Writer) error {
	return c.dumpTrace(w, "demand", nil)
}

func (c *Comm) dumpTrace(w io.Writer, reason string, cause error) error {
	r := c.shared.flight
	if r == nil {
		return fmt.Errorf("goccl: the flight recorder is off (GOCCL_TRACE_BUFFER=0)")
	}
	h := flight.Header{Rank: c.shared.ep.Rank(), Size: c.shared.ep.Size(), Dumped: time.Now(),
		Reason: reason, Capacity: len(r.slots)}
	if cause != nil {
		h.Error = cause.Error()
	}
	return flight.Write(w, h, r.entries())
}

// dumpToDir writes the record to GOCCL_TRACE_DIR/rank-R.jsonl, if set,
// and says so on stderr.
func (c *Comm) dumpToDir(reason string, cause error) {
	r := c.shared.flight
	if r == nil || r.dir == "" {
		return
	}
	path := filepath.Join(r.dir, fmt.Sprintf("rank-%d.jsonl", c.shared.ep.Rank()))
	f, err := os.Create(path)
	if err == nil {
		err = c.dumpTrace(f, reason, cause)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "goccl: rank %d: flight recorder: %v\n", c.shared.ep.Rank(), err)
		return
	}
	fmt.Fprintf(os.Stderr, "goccl: rank %d: flight recorder dumped to %s (%s)\n", c.shared.ep.Rank(), path, reason)
}

// traceReason names why a communicator was aborted, for the dump.
func traceReason(cause error) string {
	switch classOf(cause) {
	case classTimeout:
		return "timeout"
	case classMismatch:
		return "mismatch"
	}
	return "abort"
}
