package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/commslog"
)

// Every -op, checked against the sequential reference, with an awkward
// world size and dtypes of every width: #wrong must be 0 everywhere.
func TestBenchCheckEveryOp(t *testing.T) {
	for op := range benchOps {
		for _, dt := range []string{"float32", "bfloat16", "int8", "int64", "uint64", "bool", "complex64"} {
			if op == "onebit" && dt != "float32" {
				continue
			}
			redop := "sum"
			if op == "allreduce" && dt == "int8" {
				redop = "bxor"
			}
			if dt == "bool" {
				redop = "bor" // bool has no sum
			}
			args := []string{"-transport", "mem", "-n", "3", "-op", op, "-dtype", dt, "-redop", redop,
				"-root", "2", "-b", "4", "-e", "1400", "-f", "7", "-w", "1", "-iters", "2", "-check", "-format", "json", "-q"}
			var out, errb bytes.Buffer
			if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
				t.Fatalf("%s %s: exit %d: %s", op, dt, code, errb.String())
			}
			var rows []result
			if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
				t.Fatalf("%s %s: %v", op, dt, err)
			}
			if len(rows) != 4 {
				t.Fatalf("%s %s: %d rows, want 4 (4, 28, 196, 1372 bytes, rounded down)", op, dt, len(rows))
			}
			for _, r := range rows {
				if r.Wrong == nil || *r.Wrong != 0 {
					t.Errorf("%s %s %d bytes: %q wrong, want 0", op, dt, r.Bytes, r.wrongText())
				}
			}
		}
	}
}

func TestBenchAlgoAllAndFormats(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"-transport", "mem", "-n", "4", "-algo", "all", "-b", "1K", "-e", "4K", "-w", "0", "-iters", "1", "-check", "-q"}
	if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, a := range []string{"ring", "tree", "halving", "doubling"} {
		if !strings.Contains(out.String(), " "+a+" ") {
			t.Errorf("table has no %s rows:\n%s", a, out.String())
		}
		if !strings.Contains(out.String(), "\n# avg busbw "+a+": ") {
			t.Errorf("table has no average busbw of %s:\n%s", a, out.String())
		}
	}
	out.Reset()
	args = []string{"-transport", "mem", "-n", "2", "-b", "8", "-e", "8", "-w", "0", "-iters", "1", "-format", "csv", "-q"}
	if code := benchMain(context.Background(), args, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "op,ranks,") {
		t.Fatalf("csv: exit %d: %q", code, out.String())
	}
}

// TestBenchDeviceHostsim: -device hostsim runs every collective on device
// buffers through goccl's device data path (sizes past 64 KiB per message
// go device to device between the goroutine ranks, smaller ones staged)
// and -check finds every result right.
func TestBenchDeviceHostsim(t *testing.T) {
	for op := range benchOps {
		args := []string{"-device", "hostsim", "-transport", "mem", "-n", "3", "-op", op, "-root", "1",
			"-b", "4", "-e", "300K", "-f", "9", "-w", "1", "-iters", "2", "-check", "-format", "json", "-q"}
		var out, errb bytes.Buffer
		if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", op, code, errb.String())
		}
		var rows []result
		if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if len(rows) != 6 {
			t.Fatalf("%s: %d rows, want 6", op, len(rows))
		}
		for _, r := range rows {
			if r.Wrong == nil || *r.Wrong != 0 {
				t.Errorf("%s %d bytes: %q wrong, want 0", op, r.Bytes, r.wrongText())
			}
		}
	}
	var out, errb bytes.Buffer
	if code := benchMain(context.Background(), []string{"-device", "cuda", "-transport", "mem", "-n", "2", "-e", "8", "-q"}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "-tags cuda") {
		t.Errorf("-device cuda without the cuda tag: exit %d, %q; want an error saying to build with -tags cuda", code, errb.String())
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-op", "nope"}, {"-dtype", "float128"}, {"-redop", "avg", "-dtype", "int32"},
		{"-b", "2M", "-e", "1M"}, {"-root", "9", "-n", "2"}, {"-algo", "pairwise"}, {"-transport", "ib"},
		{"-f", "1"}, {"-units", "furlongs"}, {"-device", "gpu"},
		{"-redop", "sum", "-dtype", "bool"}, {"-redop", "max", "-dtype", "complex64"},
		{"-device", "hostsim", "-dtype", "uint64"}, // no device kernel for uint64
	} {
		var out, errb bytes.Buffer
		if code := benchMain(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"8": 8, "1K": 1024, "64M": 64 << 20, "1G": 1 << 30, "0": 0} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, err)
		}
	}
	if _, err := parseSize("x"); err == nil {
		t.Error("parseSize(x) succeeded")
	}
}

// TestBenchCheckOutsideTimedLoop: -check validates one call after the
// timed ones, as nccl-tests does, so it must not change the time. With the
// validation inside the timed loop (before issue 14) a 1 MiB allreduce of
// 2 ranks over mem took about 20x as long with -check. The test watches
// what runs between the start and the end of each rank's timed loop: the
// timed calls and nothing else (no refill, no upload, no validation),
// with and without -check and on device buffers too.
func TestBenchCheckOutsideTimedLoop(t *testing.T) {
	var mu sync.Mutex
	var events []string
	benchTrace = func(rank int, ev string) {
		mu.Lock()
		events = append(events, fmt.Sprintf("%d %s", rank, ev))
		mu.Unlock()
	}
	defer func() { benchTrace = nil }()
	for _, extra := range [][]string{nil, {"-check"}, {"-check", "-device", "hostsim"}, {"-check", "-op", "onebit", "-device", "hostsim"}} {
		events = nil
		args := append([]string{"-transport", "mem", "-n", "2", "-b", "64K", "-e", "128K", "-w", "1", "-iters", "3", "-q"}, extra...)
		var out, errb bytes.Buffer
		if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		in := map[string]bool{}
		calls, checks := 0, 0
		for _, e := range events {
			rank, ev, _ := strings.Cut(e, " ")
			switch ev {
			case "timed start":
				in[rank] = true
			case "timed end":
				in[rank] = false
			case "call":
				if in[rank] {
					calls++
				}
			default: // refill, check
				if in[rank] {
					t.Errorf("%v: rank %s: %s inside the timed loop", extra, rank, ev)
				}
				if ev == "check" {
					checks++
				}
			}
		}
		if calls != 2*2*3 { // 2 sizes x 2 ranks x 3 iterations
			t.Errorf("%v: %d calls timed, want 12", extra, calls)
		}
		if want := 0; len(extra) > 0 {
			want = 4
			if checks != want {
				t.Errorf("%v: %d checks, want %d (one per size and rank)", extra, checks, want)
			}
		}
	}
}

// TestBenchCheckDoesNotChangeTiming compares the times themselves, with
// and without -check, alternating; it runs only with GOCCL_TIMING_TESTS=1,
// since timings on a shared 2-core machine say little (CI fails a timing
// assertion under load). The fastest of 7 runs each must agree within 2x:
// a busy machine only ever adds time, so the fastest run is the least
// disturbed one.
func TestBenchCheckDoesNotChangeTiming(t *testing.T) {
	if os.Getenv("GOCCL_TIMING_TESTS") != "1" {
		t.Skip("a timing comparison: set GOCCL_TIMING_TESTS=1 on a quiet machine")
	}
	timeOf := func(check bool) float64 {
		t.Helper()
		args := []string{"-transport", "mem", "-n", "2", "-b", "1M", "-e", "1M", "-w", "2", "-iters", "10", "-format", "json", "-q"}
		if check {
			args = append(args, "-check")
		}
		var out, errb bytes.Buffer
		if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var rows []result
		if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("%v: %d rows, %v: %s", args, len(rows), err, out.String())
		}
		return rows[0].TimeUS
	}
	var with, without []float64
	for range 7 {
		without = append(without, timeOf(false))
		with = append(with, timeOf(true))
	}
	w, wo := slices.Min(with), slices.Min(without)
	t.Logf("fastest of 7: %.1f us with -check, %.1f us without (ratio %.2f); medians %.1f and %.1f us",
		w, wo, w/wo, median(slices.Clone(with)), median(slices.Clone(without)))
	if r := w / wo; r > 2 || r < 0.5 {
		t.Errorf("-check changes the time %.2fx: fastest %.1f us with, %.1f us without (runs: %v against %v)", r, w, wo, with, without)
	}
}

// #wrong is what -check found: empty in csv and null in json without
// -check, where nothing was checked, and a count (0 here) with it.
func TestBenchWrongEmptyWithoutCheck(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		args = append([]string{"-transport", "mem", "-n", "2", "-b", "64", "-e", "128", "-w", "0", "-iters", "1", "-q"}, args...)
		var out, errb bytes.Buffer
		if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	for _, check := range []bool{false, true} {
		var extra []string
		want := ""
		if check {
			extra, want = []string{"-check"}, "0"
		}
		recs, err := csv.NewReader(strings.NewReader(run(append(extra, "-format", "csv")...))).ReadAll()
		if err != nil || len(recs) != 3 {
			t.Fatalf("check=%v: csv: %d records, %v", check, len(recs), err)
		}
		col := -1
		for i, name := range recs[0] {
			if name == "wrong" {
				col = i
			}
		}
		if col < 0 {
			t.Fatalf("csv header has no wrong column: %v", recs[0])
		}
		for _, rec := range recs[1:] {
			if rec[col] != want {
				t.Errorf("check=%v: csv wrong = %q, want %q", check, rec[col], want)
			}
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(run(append(extra, "-format", "json")...)), &rows); err != nil || len(rows) != 2 {
			t.Fatalf("check=%v: json: %d rows, %v", check, len(rows), err)
		}
		for _, r := range rows {
			v, ok := r["wrong"]
			if !ok || (check && v != 0.0) || (!check && v != nil) {
				t.Errorf("check=%v: json wrong = %v (present %v)", check, v, ok)
			}
		}
	}
}

// The csv's bandwidths and their column names follow -units, as the
// table's do; -algo all gets one average busbw per algorithm, while the
// cost model's picks ("auto:...") are averaged as one run.
func TestBenchReportUnitsAndAverages(t *testing.T) {
	row := func(algo string, busbw float64) result {
		return result{Op: "allreduce", Ranks: 2, Transport: "mem", Bytes: 1000, Count: 250, Type: "float32",
			Redop: "sum", Root: -1, Algo: algo, TimeUS: 1, AlgBW: busbw / 2, BusBW: busbw}
	}
	cfg := &benchConfig{op: "allreduce", ranks: 2, transport: "mem", format: "csv", units: commslog.Gbps}
	var out bytes.Buffer
	if err := report(&out, cfg, []result{row("ring", 1.5)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.Contains(lines[0], ",algbw_Gbps,busbw_Gbps,") || !strings.Contains(lines[1], ",6.0000,12.0000,") {
		t.Errorf("csv with -units gbps: want algbw_Gbps 6 and busbw_Gbps 12:\n%s", out.String())
	}

	cfg.format, cfg.units = "table", commslog.GBps
	out.Reset()
	if err := report(&out, cfg, []result{row("ring", 1), row("ring", 3), row("tree", 5)}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\n# avg busbw ring: 2.000 GB/s\n", "\n# avg busbw tree: 5.000 GB/s\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", strings.TrimSpace(want), out.String())
		}
	}
	out.Reset()
	if err := report(&out, cfg, []result{row("auto:ring", 1), row("auto:tree", 3)}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), "\n# avg busbw: 2.000 GB/s\n") {
		t.Errorf("the cost model's picks are not averaged as one:\n%s", out.String())
	}
}

// -n defaults to a rank per CPU this process may use, at least 2, and the
// bench says so when it runs more ranks than there are CPUs.
func TestBenchDefaultRanksAndOversubscription(t *testing.T) {
	cpus := len(allowedCPUs())
	if cpus == 0 {
		cpus = runtime.NumCPU()
	}
	cfg, err := parseBenchFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := max(2, cpus); cfg.ranks != want {
		t.Errorf("default -n = %d, want %d (%d CPUs available)", cfg.ranks, want, cpus)
	}
	run := func(n int) string {
		var out, errb bytes.Buffer
		args := []string{"-transport", "mem", "-n", strconv.Itoa(n), "-b", "8", "-e", "8", "-w", "0", "-iters", "1", "-q"}
		if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("-n %d: exit %d: %s", n, code, errb.String())
		}
		return errb.String()
	}
	note := fmt.Sprintf("goccl bench: %d ranks on %s: ", cpus+1, plural(cpus, "CPU"))
	if got := run(cpus + 1); !strings.Contains(got, note) {
		t.Errorf("-n %d on %d CPUs: stderr %q, want it to contain %q", cpus+1, cpus, got, note)
	}
	if got := run(cpus); strings.Contains(got, "ranks on") {
		t.Errorf("-n %d on %d CPUs: stderr %q, want no note", cpus, cpus, got)
	}
}

// The progress indicator rewrites its line with \r on a terminal only: to
// a file or a pipe it writes whole lines.
func TestBenchProgressNoCarriageReturnOffTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, out := range []io.Writer{f, w, &bytes.Buffer{}} {
		if p := newProgress(out); p.tty {
			t.Errorf("%T is taken for a terminal", out)
		}
	}
	for _, tty := range []bool{false, true} {
		var buf bytes.Buffer
		p := &progress{w: &buf, tty: tty, began: time.Now()}
		p.update(1, 3)
		p.update(2, 3)
		p.finish()
		got := buf.String()
		if tty != strings.Contains(got, "\r") || !strings.HasSuffix(got, "\n") || !strings.Contains(got, "2/3 sizes done") {
			t.Errorf("terminal=%v: progress %q", tty, got)
		}
		if !tty && strings.Count(got, "\n") != 2 {
			t.Errorf("off a terminal: progress %q, want a line per update", got)
		}
	}
}

// Unknown -op, -dtype, -redop and -algo values are answered with the
// valid ones; -op's help names every op, onebit included.
func TestBenchFlagErrorsListValidValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-op", "nope"}, []string{"allreduce", "sendrecv", "onebit"}},
		{[]string{"-dtype", "float128"}, []string{"float32", "bfloat16", "int64"}},
		{[]string{"-redop", "nope"}, []string{"sum", "avg", "bxor"}},
		{[]string{"-algo", "nope"}, []string{"ring", "tree", "halving", "doubling", "all"}},
		{[]string{"-op", "alltoall", "-algo", "ring"}, []string{"pairwise"}},
	} {
		var out, errb bytes.Buffer
		if code := benchMain(context.Background(), c.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		for _, w := range c.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("%v: error %q does not name %s", c.args, errb.String(), w)
			}
		}
	}
	var out, errb bytes.Buffer
	benchMain(context.Background(), []string{"-h"}, &out, &errb)
	for op := range benchOps {
		if !slices.Contains(benchOpNames, op) {
			t.Errorf("-op %s is missing from benchOpNames", op)
		}
	}
	for _, line := range strings.Split(errb.String(), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "collective: ") {
			for _, op := range benchOpNames {
				if !strings.Contains(line, op) {
					t.Errorf("-op's help does not name %s: %s", op, line)
				}
			}
			return
		}
	}
	t.Errorf("no -op help in:\n%s", errb.String())
}

// TestBenchJoin: with -join, goccl bench is one rank of the job `goccl run`
// started (as on several hosts): -n defaults to the job's size, rank 0
// prints the rows, and an -n that differs from the job's size fails.
func TestBenchJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	t.Setenv(childEnv, "bench")
	run := func(benchArgs string) (int, string, string) {
		t.Setenv("GOCCL_TEST_BENCH_ARGS", benchArgs)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out, errb testutil.Buffer
		code := runCommand(ctx, append([]string{"-n", "3", "--"}, childArgs(t)...), &out, &errb, nil)
		return code, out.String(), errb.String()
	}
	code, out, errb := run("-join -transport tcp -op allreduce -b 8 -e 1K -f 4 -w 0 -iters 2 -check -q -format csv")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	rows := 0
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) < 13 || !strings.HasSuffix(f[0], "allreduce") {
			continue
		}
		rows++
		if !strings.HasPrefix(line, "[0] ") || f[1] != "3" || f[2] != "tcp" || f[12] != "0" {
			t.Errorf("row %q: want rank 0's, 3 ranks over tcp, 0 wrong", line)
		}
	}
	if rows != 4 { // 8, 32, 128, 512 bytes
		t.Errorf("%d allreduce rows, want 4:\n%s", rows, out)
	}
	// The table's header says which transport each rank's peers are
	// reached over.
	if code, out, errb := run("-join -transport tcp -op allreduce -b 8 -e 8 -w 0 -iters 1 -q"); code != 0 ||
		!strings.Contains(out, "# peers over: rank 0: tcp 2; rank 1: tcp 2; rank 2: tcp 2") {
		t.Errorf("the peers' transports: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	// -cpuprofile: every rank writes its own.
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	if code, out, errb := run("-join -transport tcp -op allreduce -b 8 -e 8 -w 0 -iters 100 -q -cpuprofile " + prof); code != 0 {
		t.Fatalf("-cpuprofile: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	for r := range 3 {
		if fi, err := os.Stat(profilePath(prof, r)); err != nil || fi.Size() == 0 {
			t.Errorf("rank %d's profile: %v", r, err)
		}
	}
	code, out, errb = run("-join -n 2 -transport tcp -b 8 -e 8 -w 0 -iters 1 -q")
	if code == 0 || !strings.Contains(errb+out, "-n 2, but the job has 3 ranks") {
		t.Errorf("-join -n 2 in a job of 3: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
}
