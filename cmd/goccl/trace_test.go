package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/flight"
)

var traceUpdate = flag.Bool("update", false, "rewrite the golden files in testdata/trace")

var traceT0 = time.Date(2026, 11, 24, 16, 0, 0, 0, time.UTC)

// traceCall is a call of the synthetic dumps: each seq starts a second after
// the one before and takes a millisecond.
func tcall(seq uint64, op, state string, waiting ...int) flight.Entry {
	e := flight.Entry{Seq: seq, Op: op, Count: 1024, DType: "float32", RedOp: "sum", Root: -1, Algo: "ring",
		State: state, Issued: traceT0.Add(time.Duration(seq) * time.Second), WaitingOn: waiting}
	switch op {
	case "broadcast":
		e.RedOp, e.Root = "", 0
	case "all_gather_into_tensor":
		e.RedOp = ""
	}
	if state != flight.Issued {
		e.Started = e.Issued.Add(time.Millisecond)
	}
	if state == flight.Done || state == flight.Failed {
		e.Ended = e.Started.Add(time.Millisecond)
	}
	return e
}

// doneCalls is n identical all_reduces, all done.
func doneCalls(n int) []flight.Entry {
	var es []flight.Entry
	for s := 1; s <= n; s++ {
		es = append(es, tcall(uint64(s), "all_reduce", flight.Done))
	}
	return es
}

// writeDumps writes rank-R.jsonl for each rank of a world of 4, dumped a
// minute after the last call's issue time, with a ring of capacity.
func writeDumps(t *testing.T, capacity int, dumps map[int][]flight.Entry) string {
	t.Helper()
	dir := t.TempDir()
	for r, es := range dumps {
		h := flight.Header{Rank: r, Size: 4, Job: "test", Reason: "timeout", Capacity: capacity, Dumped: traceT0.Add(time.Minute)}
		if len(es) > 0 {
			h.Dumped = es[len(es)-1].Started.Add(time.Minute)
		}
		var b bytes.Buffer
		if err := flight.Write(&b, h, es); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rank-"+strconv.Itoa(r)+".jsonl"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func analyzeTrace(t *testing.T, dir string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), []string{"trace", "analyze", dir}, &out, &errb)
	if errb.Len() > 0 && code != 2 {
		t.Errorf("stderr: %s", errb.String())
	}
	return out.String() + errb.String(), code
}

// verdictLines is the output's verdict: its lines up to the first blank one.
func verdictLines(out string) string {
	v, _, _ := strings.Cut(out, "\n\n")
	return v + "\n"
}

func wantVerdict(t *testing.T, out string, code int, wants ...string) {
	t.Helper()
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	v := verdictLines(out)
	for _, w := range wants {
		if !strings.Contains(v, w) {
			t.Errorf("verdict lacks %q:\n%s", w, out)
		}
	}
}

// A rank that skips a call among different ones: rank 1 skips #6 (an
// allgather), so its #6 is the others' #7, an allreduce.
func TestTraceSkipDifferentCall(t *testing.T) {
	others := append(doneCalls(5), tcall(6, "all_gather_into_tensor", flight.Failed), tcall(7, "all_reduce", flight.Failed))
	others[5].Error = "goccl: all_gather_into_tensor: mismatch"
	dumps := map[int][]flight.Entry{0: others, 2: others, 3: others,
		1: append(doneCalls(5), tcall(6, "all_reduce", flight.Failed))}
	out, code := analyzeTrace(t, writeDumps(t, 64, dumps))
	wantVerdict(t, out, code,
		"problem: world #6: calls differ: ranks 0, 2, 3 called all_gather_into_tensor(dtype=float32, count=1024), rank 1 called all_reduce(dtype=float32, count=1024, op=sum)",
		"rank 1 may have skipped #6 all_gather_into_tensor: its #6 is the others' #7",
		"ranks 0-3 failed it")
	for _, side := range []string{
		"    ranks 0, 2, 3  all_gather_into_tensor(dtype=float32, count=1024)\n",
		"    rank 1         all_reduce(dtype=float32, count=1024, op=sum)\n",
	} {
		if !strings.Contains(out, side) {
			t.Errorf("side by side lacks %q:\n%s", side, out)
		}
	}
}

// A rank that skips one of twelve identical calls: it has made 11 when
// the others are in their twelfth, waiting on it (rank 3 through rank 2).
func TestTraceSkipNeverEntered(t *testing.T) {
	in := func(waiting ...int) []flight.Entry {
		return append(doneCalls(11), tcall(12, "all_reduce", flight.Started, waiting...))
	}
	dumps := map[int][]flight.Entry{0: in(1), 1: doneCalls(11), 2: in(1), 3: in(2)}
	out, code := analyzeTrace(t, writeDumps(t, 64, dumps))
	wantVerdict(t, out, code,
		"problem: world #12 all_reduce(dtype=float32, count=1024, op=sum): rank 1 never entered it (its last call was #11 all_reduce); ranks 0, 2, 3 still in it\n",
		"problem: everyone waits on rank 1: it never entered world #12 (its last call was #11 all_reduce)")
	if !strings.Contains(out, "  rank 3 -> 2 -> 1\n") {
		t.Errorf("no chain from rank 3 through 2 to 1:\n%s", out)
	}
}

// A rank that calls a different collective at #7. Ranks 0 and 2 failed
// waiting on each other's different calls: that is the mismatch, not a
// cycle of waits, and the verdict must not say the waits go round.
func TestTraceDifferentCollective(t *testing.T) {
	mine := func(op string, waiting ...int) []flight.Entry {
		e := tcall(7, op, flight.Failed, waiting...)
		e.Error = "goccl: " + op + ": mismatch"
		return append(doneCalls(6), e)
	}
	dumps := map[int][]flight.Entry{0: mine("all_reduce", 2), 1: mine("all_reduce"), 2: mine("broadcast", 0), 3: mine("all_reduce")}
	out, code := analyzeTrace(t, writeDumps(t, 64, dumps))
	wantVerdict(t, out, code,
		"problem: world #7: calls differ: ranks 0, 1, 3 called all_reduce(dtype=float32, count=1024, op=sum), rank 2 called broadcast(dtype=float32, count=1024, root=0); ranks 0-3 failed it\n")
	for _, side := range []string{
		"  calls differ:\n    ranks 0, 1, 3  all_reduce(dtype=float32, count=1024, op=sum)\n    rank 2         broadcast(dtype=float32, count=1024, root=0)\n",
		"  rank 2  failed  broadcast(dtype=float32, count=1024, root=0)",
	} {
		if !strings.Contains(out, side) {
			t.Errorf("details lack %q:\n%s", side, out)
		}
	}
	if strings.Contains(out, "may have") {
		t.Errorf("a different collective is not a skip:\n%s", out)
	}
	if v := verdictLines(out); strings.Contains(v, "waits") {
		t.Errorf("the waits of mismatched calls make a verdict:\n%s", out)
	}
}

// stallDumps: rank 2 is in #9 and waits on no one; rank 1 waits on 2, rank
// 0 on 1 and rank 3 on 2.
func stallDumps(t *testing.T) string {
	in := func(waiting ...int) []flight.Entry {
		return append(doneCalls(8), tcall(9, "all_reduce", flight.Started, waiting...))
	}
	return writeDumps(t, 64, map[int][]flight.Entry{0: in(1), 1: in(2), 2: in(), 3: in(2)})
}

func TestTraceStall(t *testing.T) {
	out, code := analyzeTrace(t, stallDumps(t))
	wantVerdict(t, out, code,
		"problem: world #9 all_reduce(dtype=float32, count=1024, op=sum): ranks 0-3 still in it\n",
		"problem: everyone waits on rank 2: it is in world #9 all_reduce and waits on no one (started 1m0s before its dump)\n")
	if !strings.Contains(out, "  rank 0 -> 1 -> 2\n") {
		t.Errorf("no chain from rank 0 through 1 to 2:\n%s", out)
	}
}

func TestTraceGolden(t *testing.T) {
	out, _ := analyzeTrace(t, stallDumps(t))
	path := filepath.Join("..", "..", "testdata", "trace", "stall.txt")
	if *traceUpdate {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if out != string(want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", path, out, want)
	}
}

// A rank that died: no dump, and the others wait on it.
func TestTraceDeadRank(t *testing.T) {
	in := func(waiting ...int) []flight.Entry {
		return append(doneCalls(4), tcall(5, "all_reduce", flight.Started, waiting...))
	}
	out, code := analyzeTrace(t, writeDumps(t, 64, map[int][]flight.Entry{0: in(3), 1: in(2), 2: in(3)}))
	wantVerdict(t, out, code,
		"problem: world #5 all_reduce(dtype=float32, count=1024, op=sum): ranks 0-2 still in it; rank 3 left no dump (dead?)\n",
		"problem: everyone waits on rank 3: no dump from rank 3 (dead, or it could not write)\n")
	if !strings.Contains(out, "  rank-3.jsonl  missing\n") {
		t.Errorf("dumps lack rank 3:\n%s", out)
	}
}

// A dead rank that no one waits on is still named.
func TestTraceMissingDumpOnly(t *testing.T) {
	out, code := analyzeTrace(t, writeDumps(t, 64, map[int][]flight.Entry{0: doneCalls(3), 1: doneCalls(3), 2: doneCalls(3)}))
	wantVerdict(t, out, code, "problem: no dump from rank 3 (dead, or it could not write)\n")
}

// A group's ranks are mapped to world ranks: group 5 is world ranks 0 and
// 2; rank 0 waits on group rank 1, which is world rank 2, which never
// entered the group's #3.
func TestTraceGroup(t *testing.T) {
	g := func(seq uint64, state string, waiting ...int) flight.Entry {
		e := tcall(seq, "all_reduce", state, waiting...)
		e.Group, e.Ranks = 5, []int{0, 2}
		return e
	}
	dumps := map[int][]flight.Entry{
		0: append(doneCalls(4), g(1, flight.Done), g(2, flight.Done), g(3, flight.Started, 1)),
		1: doneCalls(4),
		2: append(doneCalls(4), g(1, flight.Done), g(2, flight.Done)),
		3: doneCalls(4),
	}
	out, code := analyzeTrace(t, writeDumps(t, 64, dumps))
	wantVerdict(t, out, code,
		"problem: group 5 #3 all_reduce(dtype=float32, count=1024, op=sum): rank 2 never entered it (its last call was #2 all_reduce); rank 0 still in it\n",
		"problem: rank 0 waits on rank 2: it never entered group 5 #3 (its last call was #2 all_reduce)\n")
	if strings.Contains(verdictLines(out), "world #") {
		t.Errorf("the world's calls agree:\n%s", out)
	}
}

// Every rank completed the same calls; a count of -1 (ranks may differ)
// matches any count.
func TestTraceAllGood(t *testing.T) {
	var dumps = map[int][]flight.Entry{}
	for r := range 4 {
		a2a := tcall(11, "all_to_all_single", flight.Done)
		a2a.RedOp, a2a.Count = "", -1
		if r == 2 {
			a2a.Count = 12
		}
		dumps[r] = append(doneCalls(10), a2a)
	}
	out, code := analyzeTrace(t, writeDumps(t, 64, dumps))
	if code != 0 || !strings.HasPrefix(out, "no problem found: all ranks completed the same calls\n") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// A full ring has forgotten older calls: the analysis says so, and a rank
// whose ring has passed a call counts as having entered it.
func TestTraceFullRing(t *testing.T) {
	full := doneCalls(10)[6:] // #7-#10 in a ring of 4
	out, code := analyzeTrace(t, writeDumps(t, 4, map[int][]flight.Entry{0: full, 1: full, 2: full, 3: doneCalls(3)}))
	wantVerdict(t, out, code, "problem: world #4: rank 3 never entered it (its last call was #3 all_reduce); ranks 0-2 passed it")
	if !strings.Contains(out, "the rings of ranks 0-2 are full (4 calls): they hold the world's calls from #7 on, so a divergence before #7 cannot be seen") {
		t.Errorf("no note of the forgotten calls:\n%s", out)
	}

	out, code = analyzeTrace(t, writeDumps(t, 4, map[int][]flight.Entry{0: full, 1: full, 2: full, 3: full}))
	if code != 0 || !strings.Contains(out, "a divergence before #7 cannot be seen") {
		t.Errorf("exit %d, want 0 with a note:\n%s", code, out)
	}
}

func TestTraceBadInput(t *testing.T) {
	if out, code := analyzeTrace(t, filepath.Join(t.TempDir(), "nowhere")); code != 2 || !strings.Contains(out, "nowhere") {
		t.Errorf("a missing directory: exit %d, output %q", code, out)
	}
	if out, code := analyzeTrace(t, t.TempDir()); code != 2 || !strings.Contains(out, "no dumps") {
		t.Errorf("no dumps: exit %d, output %q", code, out)
	}
	dir := writeDumps(t, 64, map[int][]flight.Entry{0: doneCalls(2)})
	if err := os.WriteFile(filepath.Join(dir, "rank-1.jsonl"), []byte("{\"rank\":1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := analyzeTrace(t, dir); code != 2 || !strings.Contains(out, "rank-1.jsonl: flight: line 1 is not a goccl trace header") {
		t.Errorf("a bad header: exit %d, output %q", code, out)
	}
	dir = writeDumps(t, 64, map[int][]flight.Entry{0: doneCalls(2)})
	if err := os.Rename(filepath.Join(dir, "rank-0.jsonl"), filepath.Join(dir, "rank-2.jsonl")); err != nil {
		t.Fatal(err)
	}
	if out, code := analyzeTrace(t, dir); code != 2 || !strings.Contains(out, "rank-2.jsonl: its header says rank 0") {
		t.Errorf("a misnamed dump: exit %d, output %q", code, out)
	}

	// A dump cut short keeps the calls before the bad line, with a note.
	dir = writeDumps(t, 64, map[int][]flight.Entry{0: doneCalls(3), 1: doneCalls(3), 2: doneCalls(3), 3: doneCalls(3)})
	f, err := os.OpenFile(filepath.Join(dir, "rank-3.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"group":0,"seq":4,"op":"all_red`)
	f.Close()
	if out, code := analyzeTrace(t, dir); code != 0 || !strings.Contains(out, "rank-3.jsonl: flight: line 5:") {
		t.Errorf("a dump cut short: exit %d, output %q", code, out)
	}
}

func TestTraceHelp(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{{"trace", "-h"}, {"trace", "analyze", "-h"}, {"help", "trace"}} {
		var out, errb bytes.Buffer
		code := dispatch(ctx, args, &out, &errb)
		if got := out.String() + errb.String(); code != 0 || !strings.HasPrefix(got, "usage: goccl trace") {
			t.Errorf("goccl %s: exit %d, output:\n%s", strings.Join(args, " "), code, got)
		}
	}
	for _, args := range [][]string{{"trace"}, {"trace", "frobnicate"}, {"trace", "analyze"}, {"trace", "analyze", "a", "b"}} {
		var out, errb bytes.Buffer
		if code := dispatch(ctx, args, &out, &errb); code != 2 {
			t.Errorf("goccl %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

// Waits that only go round are named as a cycle.
func TestTraceWaitCycle(t *testing.T) {
	in := func(waiting ...int) []flight.Entry {
		return append(doneCalls(2), tcall(3, "all_reduce", flight.Started, waiting...))
	}
	out, code := analyzeTrace(t, writeDumps(t, 64, map[int][]flight.Entry{0: in(1), 1: in(0), 2: in(0), 3: in(2)}))
	wantVerdict(t, out, code,
		"problem: world #3 all_reduce(dtype=float32, count=1024, op=sum): ranks 0-3 still in it\n",
		"problem: the waits go round: rank 0 -> 1 -> 0")
}
