package goccl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/internal/clock"
	"github.com/goccl/goccl/internal/flight"
	"github.com/goccl/goccl/internal/wire"
)

// The flight recorder, as PyTorch's: every communicator keeps a ring of
// its recent collectives (group, sequence number, op, count, dtype,
// reduction, root, algorithm, state, times, the caller's function, and
// for a call in flight the peer it waits on), and dumps it as JSON lines
// (internal/flight, which keeps the ring) when it is aborted (a timeout, a mismatch, a lost
// peer, a cancel), on SIGUSR1, and on demand (Comm.DumpTrace). With
// GOCCL_TRACE_DIR set, the dumps go to DIR/rank-R.jsonl, and
// `goccl trace analyze DIR` merges every rank's to say which rank never
// entered which call.
//
// GOCCL_TRACE_BUFFER=N sets the ring's size (DefaultTraceBuffer; 0 turns
// the recorder off). It has no lock of its own: a call is ordered and
// recorded in one critical section (shared.calls), and a call that
// succeeds is recorded as done and finished in another. Its times are
// internal/clock Stamps: a successful call reads one, its start, which on
// amd64 is the processor's counter (12 ns, where the monotonic clock takes
// 33; BENCHMARKS.md). GOCCL_TRACE_CALLER=1 also records the user's
// function that made each call, for 0.1-0.3 us more.

// DefaultTraceBuffer is how many recent calls the flight recorder keeps.
const DefaultTraceBuffer = flight.DefaultBuffer

// newRecorder returns the recorder GOCCL_TRACE_BUFFER and
// GOCCL_TRACE_CALLER ask for, under mu, or nil when it is off.
func newRecorder(getenv func(string) string, mu *sync.Mutex) *flight.Recorder {
	size := DefaultTraceBuffer
	if v := getenv("GOCCL_TRACE_BUFFER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "goccl: GOCCL_TRACE_BUFFER=%q is not a count; using %d\n", v, size)
		} else {
			size = n
		}
	}
	return flight.New(size, mu, getenv("GOCCL_TRACE_CALLER") == "1")
}

// watchSignal dumps c's record on SIGUSR1 while c is open, when the dumps
// have a directory to go to (GOCCL_TRACE_DIR), until stopTrace.
func (c *Comm) watchSignal() {
	sh := c.shared
	if sh.flight == nil || sh.traceDir == "" {
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
	sh.traceStop = func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}

// stopTrace ends watchSignal's handler.
func (sh *shared) stopTrace() {
	if sh.traceStop != nil {
		sh.traceOnce.Do(sh.traceStop)
	}
}

// issueLocked records k, just ordered, in the flight recorder: as issued
// at now (0: not known), and started then if started; shared.calls is
// held (take orders and records a call in one critical section).
func (k *call) issueLocked(now clock.Stamp, started bool, pcs *[6]uintptr) {
	r := k.c.shared.flight
	if r == nil || k.p == nil {
		return
	}
	r.IssueLocked(&k.trace, &flight.Call{
		Waiter: k.p, Op: k.op, Algo: k.algo, Group: k.c.id, Seq: wire.Seq(k.p.tag),
		Count: k.count, Root: k.root, DType: k.dt, RedOp: k.redop, Issued: now, AlreadyStart: started,
	}, pcs)
}

var _ flight.Waiter = (*peers)(nil)

// WaitingOn is the group rank a receive of the call waits on, or -1
// (flight.Waiter).
func (p *peers) WaitingOn() int { return int(p.waitOn.Load()) - 1 }

// GroupRanks is the world ranks of a group's call, nil for the world's
// (flight.Waiter).
func (p *peers) GroupRanks() []int {
	if p.c.id != 0 {
		return p.c.ranks
	}
	return nil
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
		Reason: reason, Capacity: r.Capacity()}
	if cause != nil {
		h.Error = cause.Error()
	}
	return flight.Write(w, h, r.Entries())
}

// dumpToDir writes the record to GOCCL_TRACE_DIR/rank-R.jsonl, if set,
// and says so on stderr.
func (c *Comm) dumpToDir(reason string, cause error) {
	if c.shared.flight == nil || c.shared.traceDir == "" {
		return
	}
	path := filepath.Join(c.shared.traceDir, fmt.Sprintf("rank-%d.jsonl", c.shared.ep.Rank()))
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
