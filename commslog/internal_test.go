package commslog

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

func TestInternal(t *testing.T) {
	ctx := t.Context()
	if IsInternal(ctx) || IsInternal(nil) {
		t.Error("plain context is internal")
	}
	in := Internal(ctx)
	if !IsInternal(in) || Internal(in) != in {
		t.Error("Internal does not mark, or marks twice")
	}
	sub, cancel := context.WithTimeout(in, time.Minute)
	defer cancel()
	if !IsInternal(sub) {
		t.Error("derived context lost the mark")
	}
}

// loggingGroup wraps a fake rank the way a communicator wraps a collective:
// it records the allgather in log unless the context is Internal.
type loggingGroup struct {
	Gatherer
	log *Logger
}

func (g loggingGroup) AllGather(ctx context.Context, send, recv any) error {
	err := g.Gatherer.AllGather(ctx, send, recv)
	if g.log.Profiling(AllGatherIntoTensor) && !IsInternal(ctx) {
		g.log.Append(Record{Op: AllGatherIntoTensor, Bytes: 8, Latency: time.Microsecond})
	}
	return err
}

// TestStragglerNotRecorded: the straggler reports' allgathers run under
// Internal, so a communicator that honours it logs nothing of theirs.
func TestStragglerNotRecorded(t *testing.T) {
	for _, style := range []Style{StyleNCCLTests, StyleDeepSpeed} {
		const n = 2
		g := newFakeGroup(n)
		logs := make([]*Logger, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			logs[r] = New(Config{Enabled: true, Style: style}, r, n)
			logs[r].Append(Record{Op: AllReduce, Bytes: 64, Latency: time.Millisecond})
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = logs[r].LogSummary(t.Context(), &bytes.Buffer{}, loggingGroup{g[r], logs[r]}, true)
			}()
		}
		wg.Wait()
		for r := range n {
			if errs[r] != nil {
				t.Fatalf("%v rank %d: %v", style, r, errs[r])
			}
			if got := logs[r].Len(); got != 1 {
				t.Errorf("%v rank %d: %d records after the straggler report, want 1", style, r, got)
			}
		}
	}
}
