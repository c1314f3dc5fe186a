package goccl_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/flight"
	"github.com/goccl/goccl/reduceop"
)

// DumpTrace lists the recent calls, oldest first, with what each agreed
// on, how it ended and the user's function that made it.
func TestDumpTrace(t *testing.T) {
	var dump bytes.Buffer
	callers := goccl.WithGetenv(func(k string) string {
		if k == "GOCCL_TRACE_CALLER" {
			return "1"
		}
		return ""
	})
	begin := time.Now()
	err := goccl.RunLocal(context.Background(), 2, func(ctx context.Context, c *goccl.Comm) error {
		if err := c.AllReduce(ctx, make([]float32, 5), reduceop.Max); err != nil {
			return err
		}
		if err := c.Broadcast(ctx, make([]int64, 3), 1); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			return c.DumpTrace(&dump)
		}
		return nil
	}, callers)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	h, es, err := flight.Read(&dump)
	if err != nil {
		t.Fatal(err)
	}
	if h.Rank != 0 || h.Size != 2 || h.Reason != "demand" || h.Capacity != goccl.DefaultTraceBuffer {
		t.Errorf("header %+v", h)
	}
	want := []flight.Entry{
		{Seq: 1, Op: "all_reduce", Count: 5, DType: "float32", RedOp: "max", Root: -1},
		{Seq: 2, Op: "broadcast", Count: 3, DType: "int64", Root: 1},
		{Seq: 3, Op: "barrier", Root: -1},
	}
	if len(es) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(es), len(want), es)
	}
	for i, e := range es {
		w := want[i]
		if e.Seq != w.Seq || e.Op != w.Op || e.Count != w.Count || e.DType != w.DType || e.RedOp != w.RedOp || e.Root != w.Root {
			t.Errorf("entry %d: %+v, want %+v", i, e, w)
		}
		// A completed call is known by its start; only failures carry
		// an end time (the hot path reads no clock of its own).
		if e.State != flight.Done || e.Issued.IsZero() || e.Started.Before(e.Issued) || !e.Ended.IsZero() {
			t.Errorf("entry %d: state %s, times %v %v %v", i, e.State, e.Issued, e.Started, e.Ended)
		}
		// The times are the wall clock's, read while the test ran (a
		// second's slack for the clock's adjustments).
		if e.Started.Before(begin.Add(-time.Second)) || e.Started.After(end.Add(time.Second)) {
			t.Errorf("entry %d: started %v, outside the test's run %v to %v", i, e.Started, begin, end)
		}
		if !strings.Contains(e.Caller, "TestDumpTrace") {
			t.Errorf("entry %d: caller %q, want the test's function", i, e.Caller)
		}
	}
}

// A dump taken while a call waits says since when: a board call made in
// place is recorded before it reads the clock (it reads it once its slot
// is published), and tells the recorder its start when it starts to wait.
func TestDumpTraceWhileWaiting(t *testing.T) {
	comms := localComms(t, 2)
	ctx := context.Background()
	begin := time.Now()
	done := make(chan error, 1)
	go func() { done <- comms[0].AllReduce(ctx, make([]float32, 2), reduceop.Sum) }() // rank 1 is late
	var last []flight.Entry
	for deadline := time.Now().Add(10 * time.Second); ; {
		var dump bytes.Buffer
		if err := comms[0].DumpTrace(&dump); err != nil {
			t.Fatal(err)
		}
		_, es, err := flight.Read(&dump)
		if err != nil {
			t.Fatal(err)
		}
		last = es
		if len(es) == 1 && es[0].State == flight.Started && !es[0].Started.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 waits in its allreduce, and its dump says %+v: want the call started, with its time", last)
		}
		time.Sleep(time.Millisecond)
	}
	if s := last[0].Started; s.Before(begin.Add(-time.Second)) || s.After(time.Now().Add(time.Second)) {
		t.Errorf("started %v, outside the test's run (from %v)", s, begin)
	}
	if err := comms[1].AllReduce(ctx, make([]float32, 2), reduceop.Sum); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A stall aborts the communicator, and every rank dumps its record to
// GOCCL_TRACE_DIR: the stalled call shows as failed on the ranks that
// waited, with whom they waited on, and as never entered on the rank that
// stalled.
func TestTraceDumpOnAbort(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"GOCCL_TRACE_DIR": dir}
	comms, err := goccl.NewLocal(3, goccl.WithTimeout(time.Second), goccl.WithGetenv(func(k string) string { return env[k] }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.AllReduce(ctx, make([]float32, 4), reduceop.Sum)
			if r != 2 { // rank 2 stalls: it never makes the second call
				c.AllReduce(ctx, make([]float32, 4), reduceop.Sum)
			}
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	for r := range 3 {
		f, err := os.Open(filepath.Join(dir, "rank-"+string(rune('0'+r))+".jsonl"))
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		h, es, err := flight.Read(f)
		f.Close()
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if h.Reason != "timeout" && h.Reason != "abort" {
			t.Errorf("rank %d: reason %q", r, h.Reason)
		}
		if r == 2 {
			if len(es) != 1 || es[0].State != flight.Done {
				t.Errorf("rank 2 (stalled): %+v, want its one completed call", es)
			}
			continue
		}
		last := es[len(es)-1]
		// The dump is taken when the rank learns of the abort: its own
		// call is failed if it timed out first, still started if a
		// peer's verdict came first. Either way it names whom it waits on.
		if len(es) != 2 || last.Seq != 2 || (last.State != flight.Failed && last.State != flight.Started) || len(last.WaitingOn) != 1 {
			t.Errorf("rank %d: %+v, want call #2 failed or started, waiting on a peer", r, es)
		}
	}
	var off bytes.Buffer
	c, _ := goccl.NewLocal(1, goccl.WithGetenv(func(k string) string {
		if k == "GOCCL_TRACE_BUFFER" {
			return "0"
		}
		return ""
	}))
	if err := c[0].DumpTrace(&off); err == nil || errors.Is(err, nil) && off.Len() > 0 {
		t.Errorf("recorder off: %v, %q", err, off.String())
	}
	c[0].Close()
}
