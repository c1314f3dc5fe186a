package sim

import (
	"bufio"
	"fmt"
	"io"
)

// TraceRun is one simulated run for WriteTrace.
type TraceRun struct {
	Name   string  // shown as the process name, e.g. "ring allreduce 1048576 B"
	Ranks  int     // the run's Config.Ranks
	Events []Event // its Result.Events (Config.Record)
}

// WriteTrace writes runs in the Chrome trace-event format that
// chrome://tracing and Perfetto read: each run a process, one row (thread)
// per rank, one slice per send, receive and reduction, times in virtual
// microseconds from the start of its run.
func WriteTrace(w io.Writer, runs ...TraceRun) error {
	bw := bufio.NewWriter(w)
	fmt.Fprint(bw, `{"displayTimeUnit":"ns","traceEvents":[`)
	sep := "\n"
	for pid, run := range runs {
		writeRun(bw, pid, run, &sep)
	}
	fmt.Fprint(bw, "\n]}\n")
	return bw.Flush()
}

func writeRun(bw *bufio.Writer, pid int, run TraceRun, sep *string) {
	fmt.Fprintf(bw, "%s"+`{"name":"process_name","ph":"M","pid":%d,"args":{"name":%q}}`, *sep, pid, run.Name)
	*sep = ",\n"
	fmt.Fprintf(bw, ",\n"+`{"name":"process_sort_index","ph":"M","pid":%d,"args":{"sort_index":%d}}`, pid, pid)
	for r := 0; r < run.Ranks; r++ {
		fmt.Fprintf(bw, ",\n"+`{"name":"thread_name","ph":"M","pid":%d,"tid":%d,"args":{"name":"rank %d"}}`, pid, r, r)
		fmt.Fprintf(bw, ",\n"+`{"name":"thread_sort_index","ph":"M","pid":%d,"tid":%d,"args":{"sort_index":%d}}`, pid, r, r)
	}
	for _, e := range run.Events {
		var name, cat string
		switch e.Kind {
		case Send:
			name, cat = fmt.Sprintf("send %d B -> %d", e.Bytes, e.Peer), "send"
		case Recv:
			name, cat = fmt.Sprintf("recv %d B <- %d", e.Bytes, e.Peer), "recv"
		case Reduce:
			name, cat = fmt.Sprintf("reduce %d B", e.Bytes), "reduce"
		default:
			continue
		}
		if e.End < e.Start {
			continue // a receive that never completed (a run that failed)
		}
		fmt.Fprintf(bw, ",\n"+`{"name":%q,"cat":%q,"ph":"X","pid":%d,"tid":%d,"ts":%.6f,"dur":%.6f,"args":{"bytes":%d,"peer":%d,"step":%d}}`,
			name, cat, pid, e.Rank, e.Start*1e6, (e.End-e.Start)*1e6, e.Bytes, e.Peer, e.Step)
	}
}
