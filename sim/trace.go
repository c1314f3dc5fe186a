package sim

import (
	"bufio"
	"fmt"
	"io"
)

// WriteTrace writes events (from a run with Config.Record) in the Chrome
// trace-event format that chrome://tracing and Perfetto read: one row
// (thread) per rank, one slice per send, receive and reduction, times in
// virtual microseconds.
func WriteTrace(w io.Writer, ranks int, events []Event) error {
	bw := bufio.NewWriter(w)
	fmt.Fprint(bw, `{"displayTimeUnit":"ns","traceEvents":[`)
	fmt.Fprint(bw, "\n"+`{"name":"process_name","ph":"M","pid":0,"args":{"name":"goccl sim"}}`)
	for r := 0; r < ranks; r++ {
		fmt.Fprintf(bw, ",\n"+`{"name":"thread_name","ph":"M","pid":0,"tid":%d,"args":{"name":"rank %d"}}`, r, r)
		fmt.Fprintf(bw, ",\n"+`{"name":"thread_sort_index","ph":"M","pid":0,"tid":%d,"args":{"sort_index":%d}}`, r, r)
	}
	for _, e := range events {
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
		fmt.Fprintf(bw, ",\n"+`{"name":%q,"cat":%q,"ph":"X","pid":0,"tid":%d,"ts":%.6f,"dur":%.6f,"args":{"bytes":%d,"peer":%d,"step":%d}}`,
			name, cat, e.Rank, e.Start*1e6, (e.End-e.Start)*1e6, e.Bytes, e.Peer, e.Step)
	}
	fmt.Fprint(bw, "\n]}\n")
	return bw.Flush()
}
