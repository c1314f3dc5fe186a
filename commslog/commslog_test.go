package commslog

import (
	"bytes"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestBusFactor(t *testing.T) {
	// Reference: nccl-tests' factors written out per n.
	ref := func(op string, n int) float64 {
		switch op {
		case AllReduce, AllReduceCoalesced, InferenceAllReduce:
			return 2 * float64(n-1) / float64(n)
		case AllGather, AllGatherIntoTensor, AllGatherCoalesced, AllGatherObject,
			ReduceScatter, ReduceScatterTensor, AllToAll, AllToAllSingle,
			Gather, GatherObject, Scatter, ScatterObjectList:
			return float64(n-1) / float64(n)
		}
		return 1
	}
	for _, op := range append(OpNames(), "made_up") {
		for n := 1; n <= 9; n++ {
			if got, want := BusFactor(op, n), ref(op, n); !near(got, want) {
				t.Errorf("BusFactor(%q, %d) = %v, want %v", op, n, got, want)
			}
		}
	}
	for _, tc := range []struct {
		op   string
		n    int
		want float64
	}{
		{AllReduce, 4, 1.5}, {AllReduce, 1, 0}, {AllReduce, 8, 1.75},
		{AllGatherIntoTensor, 4, 0.75}, {ReduceScatterTensor, 2, 0.5},
		{AllToAllSingle, 5, 0.8}, {Broadcast, 7, 1}, {Reduce, 3, 1},
		{Send, 2, 1}, {Barrier, 9, 1}, {AllReduce, 0, 0}, {AllReduce, -3, 0},
	} {
		if got := BusFactor(tc.op, tc.n); !near(got, tc.want) {
			t.Errorf("BusFactor(%q, %d) = %v, want %v", tc.op, tc.n, got, tc.want)
		}
	}
}

func TestBandwidth(t *testing.T) {
	for _, tc := range []struct {
		name         string
		r            Record
		algbw, busbw float64 // GB/s
		algGb, busGb float64 // Gbit/s
	}{
		{"1GB allreduce 1s 4 ranks", Record{Op: AllReduce, Bytes: 1e9, WorldSize: 4, Latency: time.Second}, 1, 1.5, 8, 12},
		{"allgather 4GB total in 2s on 8", Record{Op: AllGatherIntoTensor, Bytes: 4e9, WorldSize: 8, Latency: 2 * time.Second}, 2, 1.75, 16, 14},
		{"reduce-scatter input 3GB 500ms on 3", Record{Op: ReduceScatterTensor, Bytes: 3e9, WorldSize: 3, Latency: 500 * time.Millisecond}, 6, 4, 48, 32},
		{"broadcast 1MB in 1ms", Record{Op: Broadcast, Bytes: 1e6, WorldSize: 5, Latency: time.Millisecond}, 1, 1, 8, 8},
		{"all_to_all_single 2 ranks", Record{Op: AllToAllSingle, Bytes: 1e9, WorldSize: 2, Latency: time.Second}, 1, 0.5, 8, 4},
		{"one rank allreduce", Record{Op: AllReduce, Bytes: 1e9, WorldSize: 1, Latency: time.Second}, 1, 0, 8, 0},
		{"zero bytes", Record{Op: Barrier, Bytes: 0, WorldSize: 4, Latency: time.Microsecond}, 0, 0, 0, 0},
		{"zero latency", Record{Op: AllReduce, Bytes: 7, WorldSize: 4}, 0, 0, 0, 0},
		{"prime size", Record{Op: AllReduce, Bytes: 7919, WorldSize: 7, Latency: 7919 * time.Nanosecond}, 1, 12.0 / 7, 8, 96.0 / 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(Config{Enabled: true}, 0, 1)
			l.Append(tc.r)
			r := l.Records()[0]
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"algbw GB/s", GBps.Convert(r.AlgBW), tc.algbw},
				{"busbw GB/s", GBps.Convert(r.BusBW), tc.busbw},
				{"algbw Gbps", Gbps.Convert(r.AlgBW), tc.algGb},
				{"busbw Gbps", Gbps.Convert(r.BusBW), tc.busGb},
			} {
				if !near(c.got, c.want) {
					t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
				}
			}
		})
	}
}

func TestAlgBW(t *testing.T) {
	if got := AlgBW(1<<30, time.Second); got != 1<<30 {
		t.Errorf("AlgBW(1GiB, 1s) = %v", got)
	}
	if got := AlgBW(10, -time.Second); got != 0 {
		t.Errorf("AlgBW with negative latency = %v, want 0", got)
	}
}

func TestTrimmedMean(t *testing.T) {
	seq := func(n int) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = float64(i + 1)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		xs   []float64
		frac float64
		want float64
	}{
		{"empty", nil, 0.1, 0},
		{"one", []float64{5}, 0.1, 5},
		{"nine: nothing trimmed", []float64{9, 1, 1, 1, 1, 1, 1, 1, 1}, 0.1, 17.0 / 9},
		{"ten: one off each end", []float64{100, 1, 2, 3, 4, 5, 6, 7, 8, -100}, 0.1, 4.5},
		{"nineteen: one off each end", append(seq(18), 1000), 0.1, (171.0 - 1) / 17},
		{"twenty: two off each end", append(seq(19), 1000), 0.1, (190.0 - 1 - 2 - 19) / 16},
		{"frac 0.5 keeps the middle two", []float64{1, 2, 3, 4}, 0.5, 2.5}, {"frac 0.5 keeps the middle one", []float64{1, 2, 9}, 0.5, 2},
		{"frac 0", []float64{1, 2, 3, 10}, 0, 4},
	} {
		in := append([]float64(nil), tc.xs...)
		if got := TrimmedMean(tc.xs, tc.frac); !near(got, tc.want) {
			t.Errorf("%s: TrimmedMean = %v, want %v", tc.name, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.xs[i] {
				t.Errorf("%s: TrimmedMean changed its input", tc.name)
				break
			}
		}
	}
}

func TestConvertSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0B"}, {1, "1.0 B"}, {1023, "1023.0 B"}, {1024, "1.0 KB"}, {1536, "1.5 KB"},
		{4 << 20, "4.0 MB"}, {1e9, "953.67 MB"}, {1 << 30, "1.0 GB"}, {1234567, "1.18 MB"},
		{-2048, "-2.0 KB"}, {1 << 62, "4.0 EB"},
	} {
		if got := ConvertSize(tc.n); got != tc.want {
			t.Errorf("ConvertSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Units
		ok   bool
	}{
		{"", GBps, true}, {"GBps", GBps, true}, {"GB/s", GBps, true}, {"gb/s", GBps, true},
		{"Gbps", Gbps, true}, {"gbps", Gbps, true}, {"Gbit/s", Gbps, true}, {"furlongs", 0, false},
	} {
		got, err := ParseUnits(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseUnits(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if GBps.String() != "GB/s" || Gbps.String() != "Gbps" || Units(9).String() != "Units(9)" {
		t.Errorf("Units.String: %v %v %v", GBps, Gbps, Units(9))
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		"GOCCL_COMMS_LOG":           "1",
		"GOCCL_COMMS_LOG_VERBOSE":   "true",
		"GOCCL_COMMS_LOG_PROF_OPS":  " all_reduce, ,broadcast ",
		"GOCCL_COMMS_LOG_DEBUG":     "yes",
		"GOCCL_COMMS_LOG_STRAGGLER": "ON",
		"GOCCL_COMMS_LOG_UNITS":     "Gbps",
	}
	c := ConfigFromEnv(func(k string) string { return env[k] })
	if !c.Enabled || !c.Verbose || c.ProfAll || !c.Debug || !c.Straggler || c.Units != Gbps {
		t.Errorf("ConfigFromEnv = %+v", c)
	}
	if strings.Join(c.ProfOps, "|") != "all_reduce|broadcast" {
		t.Errorf("ProfOps = %q", c.ProfOps)
	}
	z := ConfigFromEnv(func(string) string { return "" })
	if z.Enabled || z.Verbose || z.ProfAll || z.Debug || z.Straggler || z.ProfOps != nil || z.Units != GBps {
		t.Errorf("empty env gives %+v", z)
	}
	if ConfigFromEnv(nil).Enabled {
		t.Error("nil getenv enables logging")
	}
	if ConfigFromEnv(func(k string) string { return map[string]string{"GOCCL_COMMS_LOG": "0"}[k] }).Enabled {
		t.Error("GOCCL_COMMS_LOG=0 enables logging")
	}
}

func TestProfiling(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		yes  []string
		no   []string
	}{
		{"disabled", Config{ProfAll: true}, nil, []string{AllReduce, Barrier}},
		{"enabled, no list: all", Config{Enabled: true}, []string{AllReduce, Barrier, "made_up"}, nil},
		{"prof_ops", Config{Enabled: true, ProfOps: []string{AllReduce, Broadcast}},
			[]string{AllReduce, Broadcast}, []string{AllGather, AllReduceCoalesced, Barrier}},
		{"prof_all beats prof_ops", Config{Enabled: true, ProfAll: true, ProfOps: []string{AllReduce}},
			[]string{AllReduce, Barrier}, nil},
	} {
		l := New(tc.cfg, 0, 4)
		for _, op := range tc.yes {
			if !l.Profiling(op) {
				t.Errorf("%s: Profiling(%q) = false", tc.name, op)
			}
			l.Append(Record{Op: op, Bytes: 8, Latency: time.Millisecond})
		}
		for _, op := range tc.no {
			if l.Profiling(op) {
				t.Errorf("%s: Profiling(%q) = true", tc.name, op)
			}
			l.Append(Record{Op: op, Bytes: 8, Latency: time.Millisecond})
		}
		if got := len(l.Records()); got != len(tc.yes) {
			t.Errorf("%s: kept %d records, want %d", tc.name, got, len(tc.yes))
		}
	}
}

func TestEveryOpCanBeProfiled(t *testing.T) {
	l := New(Config{Enabled: true}, 1, 3)
	for _, op := range OpNames() {
		l.Append(Record{Op: op, Latency: time.Millisecond})
	}
	recs := l.Records()
	if len(recs) != len(OpNames()) {
		t.Fatalf("kept %d records, want %d", len(recs), len(OpNames()))
	}
	for _, r := range recs {
		if r.Rank != 1 || r.WorldSize != 3 || math.IsNaN(r.AlgBW) || math.IsNaN(r.BusBW) {
			t.Errorf("record %+v", r)
		}
	}
	var b bytes.Buffer
	if err := l.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	for _, op := range OpNames() {
		if !strings.Contains(b.String(), "\n"+op+"\n") {
			t.Errorf("summary lacks %s", op)
		}
	}
}

func TestNilAndDisabled(t *testing.T) {
	for _, l := range []*Logger{nil, New(Config{}, 0, 2)} {
		if l.Profiling(AllReduce) || l.Enabled() || l.Debug() {
			t.Errorf("%v: reports enabled", l)
		}
		l.Append(Record{Op: AllReduce, Bytes: 1, Latency: 1})
		l.Reset()
		if r := l.Records(); len(r) != 0 {
			t.Errorf("kept %v", r)
		}
		var b bytes.Buffer
		if err := l.WriteSummary(&b); err != nil || strings.Count(b.String(), "\n") != 1 {
			t.Errorf("WriteSummary: %v, %q", err, b.String())
		}
		if err := l.LogSummary(t.Context(), &b, nil, false); err != nil {
			t.Errorf("LogSummary: %v", err)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if l.Profiling(AllReduce) {
				l.Append(Record{Op: AllReduce})
			}
		})
		if allocs != 0 {
			t.Errorf("disabled path allocates %v times", allocs)
		}
	}
	var nl *Logger
	if nl.Config().Enabled {
		t.Error("nil Config enabled")
	}
}

func TestRecordsCopyAndReset(t *testing.T) {
	l := New(Config{Enabled: true, ProfOps: []string{AllReduce}}, 0, 2)
	l.Append(Record{Op: AllReduce, Bytes: 4, Latency: time.Second})
	r := l.Records()
	r[0].Op = "changed"
	if l.Records()[0].Op != AllReduce {
		t.Error("Records shares its slice")
	}
	c := l.Config()
	c.ProfOps[0] = "changed"
	if !l.Profiling(AllReduce) || l.Config().ProfOps[0] != AllReduce {
		t.Error("Config shares ProfOps")
	}
	l.Reset()
	if len(l.Records()) != 0 {
		t.Error("Reset kept records")
	}
}

func TestConcurrentAppend(t *testing.T) {
	l := New(Config{Enabled: true}, 0, 8)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				l.Append(Record{Op: AllReduce, Bytes: int64(i), Latency: time.Microsecond})
				_ = l.Records()
			}
		}()
	}
	wg.Wait()
	if n := len(l.Records()); n != 1600 {
		t.Errorf("kept %d records, want 1600", n)
	}
}

func noTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

func TestVerbose(t *testing.T) {
	var b bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: noTime}))
	l := New(Config{Enabled: true, Verbose: true, Units: Gbps, Logger: lg}, 2, 4)
	l.Append(Record{Op: AllReduce, Bytes: 1e9, DType: "float32", Algo: "ring", Latency: time.Second})
	l.Append(Record{Op: Barrier, Latency: time.Millisecond, Caller: "main.step"})
	want := `level=INFO msg="comm op" op=all_reduce rank=2 latency_ms=1000 msg_size="953.67 MB" bytes=1000000000 dtype=float32 algo=ring algbw=8 busbw=12 units=Gbps
level=INFO msg="comm op" op=barrier rank=2 latency_ms=1 msg_size=0B bytes=0 dtype="" algo="" algbw=0 busbw=0 units=Gbps caller=main.step
`
	if b.String() != want {
		t.Errorf("verbose lines:\n%s\nwant:\n%s", b.String(), want)
	}
	// Not verbose: nothing logged.
	b.Reset()
	New(Config{Enabled: true, Logger: lg}, 0, 1).Append(Record{Op: AllReduce})
	if b.Len() != 0 {
		t.Errorf("non-verbose logger wrote %q", b.String())
	}
}

func helperCaller() string { return Caller(1) }

func appendFrom(l *Logger) { l.Append(Record{Op: AllReduce, Latency: 1}) }

func TestCaller(t *testing.T) {
	if got := Caller(0); got != "commslog.TestCaller" {
		t.Errorf("Caller(0) = %q", got)
	}
	if got := helperCaller(); got != "commslog.TestCaller" {
		t.Errorf("Caller(1) from a helper = %q", got)
	}
	if got := Caller(1000); got != "" {
		t.Errorf("Caller(1000) = %q, want empty", got)
	}
	l := New(Config{Enabled: true, Debug: true}, 0, 2)
	appendFrom(l) // a test-file function counts as the user's
	l.Append(Record{Op: AllReduce, Latency: 1, Caller: "given"})
	done := make(chan struct{})
	go func() { l.Append(Record{Op: Broadcast, Latency: 1}); close(done) }()
	<-done
	var got []string
	for _, r := range l.Records() {
		got = append(got, r.Name())
	}
	want := []string{
		"all_reduce | [Caller Func: commslog.appendFrom]",
		"all_reduce | [Caller Func: given]",
		"broadcast | [Caller Func: commslog.TestCaller.func1]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("names:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Without Debug no caller is looked up.
	l = New(Config{Enabled: true}, 0, 2)
	appendFrom(l)
	if c := l.Records()[0].Caller; c != "" {
		t.Errorf("caller without Debug: %q", c)
	}
}

func TestShortName(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/a/b.(*T).M": "b.(*T).M", "main.main": "main.main", "": "",
	} {
		if got := shortName(in); got != want {
			t.Errorf("shortName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRecordsOrderAcrossBlocks(t *testing.T) {
	for _, n := range []int{0, 1, blockLen - 1, blockLen, blockLen + 1, 3*blockLen + 7} {
		l := New(Config{Enabled: true}, 0, 2)
		for i := range n {
			l.Append(Record{Op: Send, Bytes: int64(i)})
		}
		recs := l.Records()
		if len(recs) != n || l.Len() != n {
			t.Fatalf("n=%d: Records has %d, Len %d", n, len(recs), l.Len())
		}
		for i, r := range recs {
			if r.Bytes != int64(i) {
				t.Fatalf("n=%d: record %d has Bytes %d", n, i, r.Bytes)
			}
		}
	}
}
