package commslog

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenRecords are fixed records: twelve 4 MiB allreduces whose slowest and
// fastest are trimmed, three of 1 KiB, allgathers and reduce-scatters of
// two sizes, a barrier and a debug-mode record with a caller.
func goldenRecords() []Record {
	l := New(Config{Enabled: true}, 0, 4)
	for i := range 12 {
		lat := time.Duration(10+i) * time.Millisecond
		if i == 0 {
			lat = time.Millisecond // fastest: trimmed
		}
		if i == 11 {
			lat = time.Second // slowest: trimmed
		}
		l.Append(Record{Op: AllReduce, Bytes: 4 << 20, DType: "float32", Algo: "ring", Latency: lat})
	}
	for i := range 3 {
		l.Append(Record{Op: AllReduce, Bytes: 1024, DType: "float32", Algo: "doubling", Latency: time.Duration(20+i) * time.Microsecond})
	}
	l.Append(Record{Op: AllGatherIntoTensor, Bytes: 64 << 20, DType: "bfloat16", Algo: "ring", Latency: 50 * time.Millisecond})
	l.Append(Record{Op: AllGatherIntoTensor, Bytes: 12, DType: "bfloat16", Algo: "ring", Latency: 7 * time.Microsecond})
	l.Append(Record{Op: ReduceScatterTensor, Bytes: 1e9, DType: "float16", Algo: "halving", Latency: 400 * time.Millisecond})
	l.Append(Record{Op: Barrier, Latency: 3 * time.Microsecond})
	l.Append(Record{Op: Broadcast, Bytes: 7, DType: "int8", Algo: "tree", Latency: time.Microsecond, Caller: "main.train"})
	return l.Records()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestSummaryGolden(t *testing.T) {
	for _, tc := range []struct {
		file  string
		units Units
	}{{"summary_gbytes.txt", GBps}, {"summary_gbits.txt", Gbps}} {
		var b bytes.Buffer
		if err := WriteSummary(&b, Summarize(goldenRecords()), tc.units); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.file, b.Bytes())
	}
}

func TestSummarize(t *testing.T) {
	rows := Summarize(goldenRecords())
	var ar Row
	for _, r := range rows {
		if r.Name == AllReduce && r.Bytes == 4<<20 {
			ar = r
		}
	}
	// Twelve records: one trimmed at each end leaves 11..20 ms.
	if ar.Count != 12 || ar.AvgLatency != 15500*time.Microsecond {
		t.Errorf("allreduce 4MiB row = %+v", ar)
	}
	wantTotal := time.Millisecond + time.Second
	for i := 1; i < 11; i++ {
		wantTotal += time.Duration(10+i) * time.Millisecond
	}
	if ar.TotalLatency != wantTotal {
		t.Errorf("total latency = %v, want %v", ar.TotalLatency, wantTotal)
	}
	var alg, bus float64
	for i := 1; i < 11; i++ {
		a := float64(4<<20) / (float64(10+i) / 1000)
		alg += a
		bus += a * 1.5
	}
	if !near(ar.AvgAlgBW, alg/10) || !near(ar.AvgBusBW, bus/10) {
		t.Errorf("avg bw = %v, %v; want %v, %v", ar.AvgAlgBW, ar.AvgBusBW, alg/10, bus/10)
	}
	// Sorted by name, then size.
	for i := 1; i < len(rows); i++ {
		a, b := rows[i-1], rows[i]
		if a.Name > b.Name || (a.Name == b.Name && a.Bytes >= b.Bytes) {
			t.Errorf("rows %d and %d out of order: %v, %v", i-1, i, a, b)
		}
	}
	if len(Summarize(nil)) != 0 {
		t.Error("Summarize(nil) not empty")
	}
}
