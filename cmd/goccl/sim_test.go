package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func simCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), append([]string{"sim"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func TestSimHelp(t *testing.T) {
	for _, args := range [][]string{{"sim", "-h"}, {"help", "sim"}} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), args, &out, &errb); code != 0 || !strings.HasPrefix(out.String()+errb.String(), "usage: goccl sim") {
			t.Errorf("goccl %v: exit %d:\n%s%s", args, code, out.String(), errb.String())
		}
	}
}

func TestSimBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-op", "sendrecv"}, {"-op", "nope"}, {"-algo", "pairwise"}, {"-n", "0"}, {"-n", "4", "-hosts", "5"},
		{"-alpha", "5"}, {"-beta", "-3ps"}, {"-beta", "0GB/s"}, {"-gamma", "fast"}, {"-b", "1K", "-e", "8"},
		{"-format", "xml"}, {"-oversub", "0.5"}, {"-nics", "0"}, {"extra"},
	} {
		if _, errs, code := simCmd(t, args...); code != 2 || !strings.HasPrefix(errs, "goccl sim: ") {
			t.Errorf("goccl sim %v: exit %d, stderr %q; want 2 and an error", args, code, errs)
		}
	}
}

func TestParseBetaAndTime(t *testing.T) {
	for s, want := range map[string]float64{"100Gbit/s": 8e-11, "12.5GB/s": 8e-11, "80ps": 8e-11, "0.08ns": 8e-11, "1TB/s": 1e-12} {
		got, err := parseBeta(s)
		if err != nil || math.Abs(got-want) > want*1e-9 {
			t.Errorf("parseBeta(%q) = %g, %v; want %g", s, got, err, want)
		}
	}
	for s, want := range map[string]float64{"5us": 5e-6, "5µs": 5e-6, "1.5ms": 1.5e-3, "2ps": 2e-12, "0s": 0, "0": 0} {
		got, err := parseTime(s)
		if err != nil || math.Abs(got-want) > want*1e-9 {
			t.Errorf("parseTime(%q) = %g, %v; want %g", s, got, err, want)
		}
	}
}

// The -v transcript of the ring allreduce is the one in the ring's doc
// comment and in testdata, plus virtual times.
func TestSimVerboseTranscript(t *testing.T) {
	want, err := os.ReadFile("../../testdata/ring_allreduce_4.txt")
	if err != nil {
		t.Fatal(err)
	}
	out, errs, code := simCmd(t, "-n", "4", "-op", "allreduce", "-algo", "ring", "-dtype", "int64", "-b", "80", "-v")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	times := regexp.MustCompile(`   \([0-9.]+ \.\. [0-9.]+ us\)$`)
	var got strings.Builder
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "step ") {
			if !times.MatchString(line) {
				t.Errorf("line without times: %q", line)
			}
			got.WriteString(times.ReplaceAllString(line, "") + "\n")
		}
	}
	if got.String() != string(want) {
		t.Errorf("transcript:\n%s\nwant:\n%s", got.String(), want)
	}
}

// -check moves real data for every collective and algorithm: no element
// may be wrong.
func TestSimCheck(t *testing.T) {
	for _, op := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter"} {
		out, errs, code := simCmd(t, "-n", "6", "-hosts", "2", "-op", op, "-b", "8", "-e", "4K", "-f", "8", "-check", "-format", "csv")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", op, code, errs)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) < 2 {
			t.Fatalf("%s: no rows:\n%s", op, out)
		}
		for _, r := range recs[1:] {
			if r[12] != "0" {
				t.Errorf("%s: row %v: #wrong %q", op, r, r[12])
			}
		}
	}
}

// The table has the bench columns, time in virtual microseconds; the ring
// allreduce on one host of 4 ranks at 1 MiB pays 2·3 steps of
// α_intra + 256 KiB·β_intra (defaults 1 us, 200 GB/s) and, its blocks
// being one segment each, 3 reductions of 256 KiB·γ (2 ps) that nothing
// overlaps.
func TestSimTableAndJSON(t *testing.T) {
	out, errs, code := simCmd(t, "-n", "4", "-hosts", "1", "-algo", "ring", "-b", "1M", "-e", "1M", "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []result
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("json: %v:\n%s", err, out)
	}
	want := (6*(1e-6+262144/200e9) + 3*262144*2e-12) * 1e6
	if r := rows[0]; math.Abs(r.TimeUS-want) > want*1e-6 || r.Transport != "sim" || r.Algo != "ring" {
		t.Errorf("row %+v: want time %.3f us", r, want)
	}
	out, _, code = simCmd(t, "-n", "16", "-op", "allgather", "-b", "1K", "-e", "4K")
	if code != 0 || !strings.Contains(out, "time(us)") || !strings.Contains(out, "busbw") || !strings.Contains(out, "# avg busbw ring") || !strings.Contains(out, "doubling") {
		t.Errorf("table:\n%s", out)
	}
	// Same command, same output: the simulation is deterministic.
	again, _, _ := simCmd(t, "-n", "16", "-op", "allgather", "-b", "1K", "-e", "4K")
	if again != out {
		t.Errorf("second run differs:\n%s\nfirst:\n%s", again, out)
	}
}

func TestSimTraceAndPlot(t *testing.T) {
	dir := t.TempDir()
	tr, pl := filepath.Join(dir, "t.json"), filepath.Join(dir, "p.svg")
	_, errs, code := simCmd(t, "-n", "5", "-hosts", "2", "-b", "1K", "-e", "2K", "-trace", tr, "-plot", pl, "-format", "csv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	var trace struct {
		TraceEvents []struct {
			Name string
			Ph   string
			Pid  int
			Tid  int
			Args map[string]any
		}
	}
	if err := json.Unmarshal(b, &trace); err != nil {
		t.Fatal(err)
	}
	procs, slices := map[string]bool{}, map[string]int{}
	for _, e := range trace.TraceEvents {
		if e.Name == "process_name" {
			procs[e.Args["name"].(string)] = true
		}
		if e.Ph == "X" {
			slices[strings.Fields(e.Name)[0]]++
		}
	}
	// 5 algorithms (the two-level one runs one level on uneven hosts) x 2 sizes.
	if len(procs) != 10 || slices["send"] == 0 || slices["send"] != slices["recv"] || slices["reduce"] == 0 {
		t.Errorf("trace has processes %v and slices %v", procs, slices)
	}
	if st, err := os.Stat(pl); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}

// The auto choice knows the hosts: on 1,024 ranks of 8 a host a 1 MiB
// allreduce takes the two-level one (254 us simulated; the double tree,
// the best one-level algorithm, 784 us), where the host-blind model took
// Rabenseifner's halving (1,410 us), and 64 ranks at 4 MiB take the ring,
// not halving (666 against 4,746 us).
func TestSimAutoKnowsHosts(t *testing.T) {
	for _, tc := range []struct {
		n, size string
		want    string
	}{{"1024", "1M", "auto:twolevel"}, {"64", "4M", "auto:ring"}} {
		out, errs, code := simCmd(t, "-n", tc.n, "-algo", "", "-b", tc.size, "-e", tc.size, "-format", "csv")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 || recs[1][8] != tc.want {
			t.Errorf("-n %s at %s: rows %q, want one %s", tc.n, tc.size, recs[1:], tc.want)
		}
	}
}

// Without -algo each size runs algo.SelectTopo's choice, named
// auto:<family>.
func TestSimAutoAlgo(t *testing.T) {
	out, errs, code := simCmd(t, "-n", "8", "-algo", "", "-b", "8", "-e", "64M", "-f", "64", "-format", "csv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[1:] {
		if !strings.HasPrefix(r[8], "auto:") {
			t.Errorf("algo %q, want auto:<family>", r[8])
		}
		if us, err := strconv.ParseFloat(r[9], 64); err != nil || us <= 0 {
			t.Errorf("time %q", r[9])
		}
	}
}
