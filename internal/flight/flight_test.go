package flight

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	h := Header{Rank: 2, Size: 4, Dumped: at, Reason: "timeout", Capacity: 256}
	es := []Entry{
		{Group: 0, Seq: 1, Op: "all_reduce", Count: 8, DType: "float32", RedOp: "sum", Root: -1, State: Done, Issued: at, Started: at, Ended: at},
		{Group: 7, Seq: 3, Op: "broadcast", Count: 4, Root: 1, Ranks: []int{0, 2}, WaitingOn: []int{0}, State: Started, Issued: at, Started: at},
	}
	var b bytes.Buffer
	if err := Write(&b, h, es); err != nil {
		t.Fatal(err)
	}
	h2, es2, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Trace != "goccl" || h2.Rank != 2 || h2.Reason != "timeout" || len(es2) != 2 {
		t.Fatalf("read back %+v, %d entries", h2, len(es2))
	}
	if es2[1].Group != 7 || es2[1].WaitingOn[0] != 0 || !es2[1].Ended.IsZero() || es2[0].RedOp != "sum" {
		t.Fatalf("entries read back as %+v", es2)
	}
}

func TestReadRefusesOthers(t *testing.T) {
	for _, in := range []string{"", "{}\n", "not json\n", `{"trace":"goccl","rank":0}` + "\n{bad\n"} {
		if _, _, err := Read(strings.NewReader(in)); err == nil {
			t.Errorf("Read(%q): no error", in)
		}
	}
}
