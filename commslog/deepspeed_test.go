package commslog

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// styleGoldenDir holds the golden text of the two styles, at the root of
// the repository (testdata/commslog).
var styleGoldenDir = filepath.Join("..", "testdata", "commslog")

// goldenAt compares got with dir/name, or writes it there with -update.
func goldenAt(t *testing.T, dir, name string, got []byte) {
	t.Helper()
	path := filepath.Join(dir, name)
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./commslog -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// styleRecords are fixed records (no clock) on 4 ranks covering each of
// DeepSpeed's rules: goldenRecords, then one op of each kind with sizes
// that show where the styles count differently, the order DeepSpeed keeps
// (names as they first appear), a Python rounding tie (1152 B is 1.125 KB,
// "1.12 KB"), and ops DeepSpeed cannot log.
func styleRecords() []Record {
	recs := goldenRecords()
	more := []Record{
		{Op: AllGather, Bytes: 4 << 20, Latency: 2 * time.Millisecond},            // list form: 1 MiB per rank
		{Op: ReduceScatter, Bytes: 4 << 20, Latency: 2 * time.Millisecond},        // whole input
		{Op: AllToAllSingle, Bytes: 8 << 20, Latency: 3 * time.Millisecond},       // one rank's send buffer
		{Op: Gather, Bytes: 4096, Latency: 40 * time.Microsecond},                 // 1 KiB per rank
		{Op: Scatter, Bytes: 4096, Latency: 41 * time.Microsecond},                // 1 KiB per rank
		{Op: Send, Bytes: 1152, Latency: 5 * time.Microsecond},                    // 1.125 KB: a tie
		{Op: Recv, Bytes: 1152, Latency: 6 * time.Microsecond},                    //
		{Op: InferenceAllReduce, Bytes: 1 << 20, Latency: 300 * time.Microsecond}, //
		{Op: AllReduceCoalesced, Bytes: 3 << 20, Latency: 900 * time.Microsecond}, //
		{Op: AllGatherObject, Bytes: 300, Latency: 80 * time.Microsecond},         // DeepSpeed cannot log these
		{Op: MonitoredBarrier, Latency: 9 * time.Microsecond},                     //
		{Op: AllToAll, Bytes: 8 << 20, Latency: 3 * time.Millisecond},             //
		{Op: AllReduce, Bytes: 1024, Latency: 23 * time.Microsecond},              // a name seen before
	}
	for i := range more {
		more[i].Rank, more[i].WorldSize = 0, 4
		more[i].AlgBW = AlgBW(more[i].Bytes, more[i].Latency)
		more[i].BusBW = more[i].AlgBW * BusFactor(more[i].Op, 4)
	}
	return append(recs, more...)
}

// msgOnly is a slog handler that writes each message on a line of its own,
// as DeepSpeed's text appears after its logger's prefix.
type msgOnly struct{ b *bytes.Buffer }

func (h msgOnly) Enabled(context.Context, slog.Level) bool { return true }
func (h msgOnly) Handle(_ context.Context, r slog.Record) error {
	h.b.WriteString(r.Message + "\n")
	return nil
}
func (h msgOnly) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h msgOnly) WithGroup(string) slog.Handler      { return h }

// TestStylesGolden feeds the same fixed records through both styles: the
// summary and the verbose lines of each are compared with the golden text
// in testdata/commslog.
func TestStylesGolden(t *testing.T) {
	for _, tc := range []struct {
		style   Style
		summary string
		verbose string
		handler func(*bytes.Buffer) slog.Handler
	}{
		{StyleDeepSpeed, "summary_deepspeed.txt", "verbose_deepspeed.txt",
			func(b *bytes.Buffer) slog.Handler { return msgOnly{b} }},
		{StyleNCCLTests, "summary_nccl.txt", "verbose_nccl.txt",
			func(b *bytes.Buffer) slog.Handler {
				return slog.NewTextHandler(b, &slog.HandlerOptions{ReplaceAttr: noTime})
			}},
	} {
		t.Run(tc.style.String(), func(t *testing.T) {
			var vb bytes.Buffer
			l := New(Config{Enabled: true, Verbose: true, Style: tc.style, Units: Gbps, Logger: slog.New(tc.handler(&vb))}, 0, 4)
			for _, r := range styleRecords() {
				l.Append(r)
			}
			var sb bytes.Buffer
			if err := l.WriteSummary(&sb); err != nil {
				t.Fatal(err)
			}
			goldenAt(t, styleGoldenDir, tc.summary, sb.Bytes())
			goldenAt(t, styleGoldenDir, tc.verbose, vb.Bytes())
			var lb bytes.Buffer
			if err := l.LogSummary(t.Context(), &lb, nil, false); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(lb.Bytes(), sb.Bytes()) {
				t.Errorf("LogSummary without straggler differs from WriteSummary:\n%s", lb.Bytes())
			}
		})
	}
}

func TestDeepSpeedSummaryLayout(t *testing.T) {
	var b bytes.Buffer
	if err := WriteDeepSpeedSummary(&b, SummarizeDeepSpeed(styleRecords())); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	header := "Comm. Op            Message Size        Count               Total Latency(ms)   Avg Latency(ms)     tput_avg (Gbps)     busbw_avg (Gbps)    "
	if lines[0] != header {
		t.Errorf("header\n%q\nwant\n%q", lines[0], header)
	}
	// Names in the order they first appear; all_reduce's later record
	// joins its first block.
	var names []string
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, " ") {
			names = append(names, l)
		} else if len(l) != 7*dsCol {
			t.Errorf("row %q is %d wide, want %d", l, len(l), 7*dsCol)
		}
	}
	want := []string{AllReduce, AllGatherIntoTensor, ReduceScatterTensor, Barrier, Broadcast + " | [Caller Func: main.train]",
		AllGather, ReduceScatter, AllToAllSingle, Gather, Scatter, Send, Recv, InferenceAllReduce, AllReduceCoalesced,
		AllGatherObject, MonitoredBarrier, AllToAll}
	if !slices.Equal(names, want) {
		t.Errorf("names %q\nwant %q", names, want)
	}
	// all_reduce: 1.0 KB (4 records) before 4.0 MB (12).
	if !strings.HasPrefix(strings.TrimLeft(lines[2], " "), "1.0 KB              4 ") ||
		!strings.HasPrefix(strings.TrimLeft(lines[3], " "), "4.0 MB              12 ") {
		t.Errorf("all_reduce rows:\n%s\n%s", lines[2], lines[3])
	}
}

func TestDeepSpeedMsgSize(t *testing.T) {
	for _, tc := range []struct {
		op    string
		bytes int64
		want  int64
	}{
		{AllReduce, 4096, 4096},
		{AllGatherIntoTensor, 4096, 1024}, // the input, not the output
		{AllGather, 4096, 1024},
		{AllGatherCoalesced, 4096, 1024},
		{ReduceScatterTensor, 4096, 4096}, // the whole input
		{ReduceScatter, 4096, 4096},
		{AllToAllSingle, 4096, 4096},
		{Gather, 4096, 1024},  // one rank's input
		{Scatter, 4096, 1024}, // one rank's output
		{Broadcast, 4096, 4096},
		{Barrier, 0, 0},
	} {
		if got := DeepSpeedMsgSize(tc.op, tc.bytes, 4); got != tc.want {
			t.Errorf("DeepSpeedMsgSize(%s, %d, 4) = %d, want %d", tc.op, tc.bytes, got, tc.want)
		}
	}
	if got := DeepSpeedMsgSize(AllGather, 4096, 0); got != 4096 {
		t.Errorf("n = 0: %d", got)
	}
}

func TestDeepSpeedBW(t *testing.T) {
	// 10^6 bytes in 1 ms is 8 Gbps; n = 4.
	for _, tc := range []struct {
		op          string
		size        int64
		tput, busbw float64
	}{
		{AllReduce, 1e6, 16, 12}, // 2x the size; busbw size*2(n-1)/n
		{AllReduceCoalesced, 1e6, 16, 12},
		{InferenceAllReduce, 1e6, 16, 12},
		{AllGatherIntoTensor, 1e6, 32, 24}, // size*n; (n-1)/n
		{AllGather, 1e6, 32, 24},
		{ReduceScatterTensor, 1e6, 32, 24},
		{ReduceScatter, 1e6, 32, 24},
		{AllToAllSingle, 1e6, 8, 6},
		{AllToAll, 1e6, 8, 6},
		{Broadcast, 1e6, 8, 8},
		{Reduce, 1e6, 8, 8},
		{Gather, 1e6, 8, 8},
		{Scatter, 1e6, 8, 8},
		{Send, 1e6, 8, 8},
		{Irecv, 1e6, 8, 8},
		{Barrier, 0, 0, 0},
		{AllGatherObject, 1e6, 8, 8},
	} {
		tput, busbw := DeepSpeedBW(tc.op, tc.size, time.Millisecond, 4)
		if !near(tput, tc.tput) || !near(busbw, tc.busbw) {
			t.Errorf("DeepSpeedBW(%s) = %v, %v; want %v, %v", tc.op, tput, busbw, tc.tput, tc.busbw)
		}
	}
	if a, b := DeepSpeedBW(AllReduce, 1e6, 0, 4); a != 0 || b != 0 {
		t.Errorf("zero latency: %v, %v", a, b)
	}
}

func TestDeepSpeedVerboseLine(t *testing.T) {
	r := Record{Op: AllGatherIntoTensor, Bytes: 4 << 20, WorldSize: 4, Latency: 2 * time.Millisecond}
	want := "comm op: all_gather_into_tensor | time (ms): 2.00 | msg size: 1.0 MB | algbw (Gbps): 16.78 | busbw (Gbps): 12.58"
	if got := DeepSpeedVerboseLine(r); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// Only rank 0 logs, as log_dist(..., ranks=[0]).
	var b bytes.Buffer
	l := New(Config{Enabled: true, Verbose: true, Style: StyleDeepSpeed, Logger: slog.New(msgOnly{&b})}, 1, 4)
	l.Append(r)
	if b.Len() != 0 {
		t.Errorf("rank 1 logged %q", b.String())
	}
}

// TestConvertSizePython checks ConvertSize against what DeepSpeed's
// convert_size printed under Python 3.11 for the same numbers.
func TestConvertSizePython(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0B", 1: "1.0 B", 999: "999.0 B", 1023: "1023.0 B", 1024: "1.0 KB",
		1152: "1.12 KB", 1408: "1.38 KB", // ties, to even
		5000: "4.88 KB", 1048575: "1024.0 KB", 1073741823: "1024.0 MB",
		123456789: "117.74 MB", 1e9: "953.67 MB",
		1125899906842623: "1.0 PB", // log(n)/log(1024) rounds up to 5
		math.MaxInt64:    "8.0 EB",
	} {
		if got := ConvertSize(n); got != want {
			t.Errorf("ConvertSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDeepSpeedTrimMean(t *testing.T) {
	seq := func(n int) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = float64(i)
		}
		return s
	}
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{1, 2, 3, 4, 100}, 22},               // k = round(0.5) = 0
		{[]float64{60, 1, 2, 3, 4, 5}, 3.5},            // k = round(0.6) = 1
		{seq(15), 7},                                   // k = round(1.5) = 2
		{append(seq(25), 1000), 12.5},                  // k = round(2.6) = 3
		{append(seq(24), 1000), (2 + 22) / 2.0},        // k = round(2.5) = 2, to even
		{[]float64{0.1, 0.2, 0.3}, 0.2000000000000000}, // numpy: (0.1+0.2+0.3)/3
	} {
		if got := DeepSpeedTrimMean(tc.xs); !near(got, tc.want) {
			t.Errorf("DeepSpeedTrimMean(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	xs := []float64{3, 1, 2}
	DeepSpeedTrimMean(xs)
	if !slices.Equal(xs, []float64{3, 1, 2}) {
		t.Error("DeepSpeedTrimMean sorted its argument")
	}
}

// TestNumpySum checks the pairwise blocks: 0.1 added 10 times one by one
// is 0.9999999999999999, but numpy's eight accumulators give 1.
func TestNumpySum(t *testing.T) {
	tenth := slices.Repeat([]float64{0.1}, 10)
	if got := numpySum(tenth); got != 1 {
		t.Errorf("numpySum(10 x 0.1) = %v, want 1", got)
	}
	if got := numpySum(tenth[:7]); got != 0.7 {
		t.Errorf("numpySum(7 x 0.1) = %v, want %v (in order)", got, 0.1+0.1+0.1+0.1+0.1+0.1+0.1)
	}
	big := make([]float64, 1000)
	for i := range big {
		big[i] = float64(i)
	}
	if got := numpySum(big); got != 499500 {
		t.Errorf("numpySum(0..999) = %v", got)
	}
	if got := pySum([]float64{1e16, 1, 1}); got != 1e16+2 {
		t.Errorf("pySum compensation: %v", got)
	}
}

func TestStyleParse(t *testing.T) {
	for s, want := range map[string]Style{"": StyleNCCLTests, "nccl-tests": StyleNCCLTests, "NCCL": StyleNCCLTests,
		"deepspeed": StyleDeepSpeed, "DeepSpeed": StyleDeepSpeed, "ds": StyleDeepSpeed} {
		if got, err := ParseStyle(s); err != nil || got != want {
			t.Errorf("ParseStyle(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseStyle("csv"); err == nil {
		t.Error("ParseStyle(csv): no error")
	}
	var st Style
	if err := st.UnmarshalText([]byte("deepspeed")); err != nil || st != StyleDeepSpeed {
		t.Errorf("UnmarshalText: %v, %v", st, err)
	}
	if b, err := StyleDeepSpeed.MarshalText(); err != nil || string(b) != "deepspeed" {
		t.Errorf("MarshalText: %s, %v", b, err)
	}
	if _, err := Style(9).MarshalText(); err == nil {
		t.Error("MarshalText(9): no error")
	}
	env := map[string]string{EnvEnabled: "1", EnvStyle: "deepspeed"}
	if c := ConfigFromEnv(func(k string) string { return env[k] }); c.Style != StyleDeepSpeed {
		t.Errorf("GOCCL_COMMS_LOG_STYLE=deepspeed: %v", c.Style)
	}
	env[EnvStyle] = "bogus"
	if c := ConfigFromEnv(func(k string) string { return env[k] }); c.Style != StyleNCCLTests {
		t.Errorf("GOCCL_COMMS_LOG_STYLE=bogus: %v", c.Style)
	}
}

func TestParseDeepSpeed(t *testing.T) {
	// The block of DeepSpeed's tutorial (docs/_tutorials/comms-logging.md).
	c, err := ParseDeepSpeed([]byte(`{"enabled": true, "verbose": false, "prof_all": true, "debug": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled || c.Verbose || !c.ProfAll || c.Debug || c.Style != StyleDeepSpeed || c.ProfOpsOnly {
		t.Errorf("tutorial block: %+v", c)
	}
	// Defaults: prof_all true.
	c, err = ParseDeepSpeed([]byte(`{}`))
	if err != nil || c.Enabled || !c.ProfAll || c.Style != StyleDeepSpeed {
		t.Errorf("{}: %+v, %v", c, err)
	}
	// prof_all false: only prof_ops, or nothing.
	c, err = ParseDeepSpeed([]byte(`{"enabled": true, "prof_all": false, "prof_ops": ["all_reduce", "broadcast"], "verbose": true, "debug": true}`))
	if err != nil {
		t.Fatal(err)
	}
	l := New(c, 0, 2)
	if !l.Profiling(AllReduce) || !l.Profiling(Broadcast) || l.Profiling(Barrier) || !c.Verbose || !c.Debug {
		t.Errorf("prof_ops: %+v", c)
	}
	c, err = ParseDeepSpeed([]byte(`{"enabled": true, "prof_all": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if l := New(c, 0, 2); l.Profiling(AllReduce) || !l.Enabled() {
		t.Errorf("prof_all false, no prof_ops: times all_reduce (%+v)", c)
	}
	c, err = ParseDeepSpeed([]byte(`{"enabled": true, "style": "nccl-tests"}`))
	if err != nil || c.Style != StyleNCCLTests {
		t.Errorf("style: %+v, %v", c, err)
	}
	for block, words := range map[string]string{
		`{"enabled": true, "prof_al": true}`: `unknown key "prof_al"`,
		`{"zzz": 1, "aaa": 2}`:               `unknown key "aaa"`,
		`{"enabled": "yes"}`:                 `"enabled" must be true or false`,
		`{"verbose": null}`:                  `"verbose" must be true or false`,
		`{"prof_ops": "all_reduce"}`:         `"prof_ops" must be a list`,
		`{"prof_ops": [1]}`:                  `"prof_ops" must be a list`,
		`{"style": "csv"}`:                   `unknown style "csv"`,
		`{"style": 1}`:                       `"style" must be a string`,
		`[1]`:                                `comms_logger`,
		`null`:                               `want a JSON object`,
		`{"enabled": true`:                   `comms_logger`,
	} {
		if _, err := ParseDeepSpeed([]byte(block)); err == nil || !strings.Contains(err.Error(), words) {
			t.Errorf("ParseDeepSpeed(%s) = %v, want an error with %q", block, err, words)
		}
	}
}

func TestParseDeepSpeedConfig(t *testing.T) {
	file := `{"train_batch_size": 8, "zero_optimization": {"stage": 2},
		"comms_logger": {"enabled": true, "verbose": true, "prof_ops": ["all_reduce"]}}`
	c, err := ParseDeepSpeedConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled || !c.Verbose || !c.ProfAll || !slices.Equal(c.ProfOps, []string{AllReduce}) || c.Style != StyleDeepSpeed {
		t.Errorf("config: %+v", c)
	}
	c, err = ParseDeepSpeedConfig([]byte(`{"train_batch_size": 8}`))
	if err != nil || c.Enabled || c.Style != StyleDeepSpeed {
		t.Errorf("no block: %+v, %v", c, err)
	}
	if _, err := ParseDeepSpeedConfig([]byte(`{"comms_logger": {"enable": true}}`)); err == nil || !strings.Contains(err.Error(), `"enable"`) {
		t.Errorf("bad block: %v", err)
	}
	if _, err := ParseDeepSpeedConfig([]byte(`not json`)); err == nil {
		t.Error("not JSON: no error")
	}
}

// dsStragglerRecords gives rank r of n the same calls as every other rank,
// with latencies that differ by rank.
func dsStragglerRecords(r int) []Record {
	var recs []Record
	for i := range 12 {
		recs = append(recs, Record{Op: AllReduce, Bytes: 4 << 20, WorldSize: 3,
			Latency: time.Duration(10+i+3*r*(i%2)) * time.Millisecond})
	}
	recs = append(recs,
		Record{Op: AllGatherIntoTensor, Bytes: 3 << 20, WorldSize: 3, Latency: time.Duration(5+r) * time.Millisecond},
		Record{Op: Barrier, WorldSize: 3, Latency: time.Duration(100*(r+1)) * time.Microsecond},
		Record{Op: AllReduce, Bytes: 1024, WorldSize: 3, Latency: time.Duration(30-r) * time.Microsecond})
	return recs
}

func TestDeepSpeedStraggler(t *testing.T) {
	const n = 3
	g := newFakeGroup(n)
	out := make([]bytes.Buffer, n)
	rows := make([][]DeepSpeedStragglerRow, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := New(Config{Enabled: true, Style: StyleDeepSpeed, Straggler: true}, r, n)
			for _, rec := range dsStragglerRecords(r) {
				l.Append(rec)
			}
			errs[r] = l.LogSummary(t.Context(), &out[r], g[r], false)
			if errs[r] == nil {
				rows[r], errs[r] = DeepSpeedStraggler(t.Context(), g[r], l.Records())
			}
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	goldenAt(t, styleGoldenDir, "straggler_deepspeed_rank2.txt", out[2].Bytes())
	// all_reduce 4 MB: the minimum is rank 0's, call by call.
	var ar DeepSpeedStragglerRow
	for _, row := range rows[2] {
		if row.Name == AllReduce && row.MsgSize == 4<<20 {
			ar = row
		}
	}
	if ar.Count != 12 {
		t.Fatalf("row %+v", ar)
	}
	var total, excess float64
	for i := range 12 {
		total += float64(10 + i)
		excess += float64(3 * 2 * (i % 2))
	}
	if !near(ar.TotalCommLat, total) || !near(ar.TotalStraggler, excess) || !near(ar.AvgStraggler, 6*5/10.0) {
		t.Errorf("rank 2 all_reduce: %+v (want total %v, straggler %v)", ar, total, excess)
	}
	for _, row := range rows[0] {
		if row.TotalStraggler != 0 && row.Name != Barrier && row.MsgSize != 1024 {
			t.Errorf("rank 0 is the fastest but has straggler %+v", row)
		}
	}
}

func TestDeepSpeedStragglerMismatch(t *testing.T) {
	const n = 2
	g := newFakeGroup(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs := dsStragglerRecords(0)
			if r == 1 {
				recs = recs[1:] // one all_reduce fewer
			}
			_, errs[r] = DeepSpeedStraggler(t.Context(), g[r], recs)
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), fmt.Sprintf("rank %d logged other", 1-r)) {
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
	if _, err := DeepSpeedStraggler(t.Context(), failGatherer{}, nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("failing gatherer: %v", err)
	}
	// No records anywhere: one allgather, no rows.
	g = newFakeGroup(n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rows []DeepSpeedStragglerRow
			rows, errs[r] = DeepSpeedStraggler(t.Context(), g[r], nil)
			if len(rows) != 0 {
				errs[r] = fmt.Errorf("rows %v", rows)
			}
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Errorf("empty, rank %d: %v", r, errs[r])
		}
	}
}
