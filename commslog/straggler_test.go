package commslog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeGroup is n in-process ranks that can allgather []float64: each rank
// sends its slice, numbered by its round, to every inbox, then reads the n
// slices of that round from its own, keeping those of the next round that
// a faster rank already sent (a rank is at most one round ahead of any
// other, since finishing a round takes every rank's message of it).
type fakeGroup struct {
	n       int
	inbox   []chan fakeMsg
	round   []int       // per rank, its allgathers so far (only its goroutine touches it)
	pending [][]fakeMsg // per rank, messages of its next round that came early
}

type fakeMsg struct {
	from, round int
	v           []float64
}

type fakeRank struct {
	g    *fakeGroup
	rank int
}

func newFakeGroup(n int) []Gatherer {
	g := &fakeGroup{n: n, inbox: make([]chan fakeMsg, n), round: make([]int, n), pending: make([][]fakeMsg, n)}
	rs := make([]Gatherer, n)
	for i := range n {
		g.inbox[i] = make(chan fakeMsg, 2*n)
		rs[i] = fakeRank{g, i}
	}
	return rs
}

func (f fakeRank) Rank() int { return f.rank }
func (f fakeRank) Size() int { return f.g.n }

func (f fakeRank) AllGather(ctx context.Context, send, recv any) error {
	s, ok1 := send.([]float64)
	r, ok2 := recv.([]float64)
	if !ok1 || !ok2 || len(r) != f.g.n*len(s) {
		return fmt.Errorf("fake allgather: bad buffers %T %T", send, recv)
	}
	round := f.g.round[f.rank]
	f.g.round[f.rank]++
	for _, in := range f.g.inbox {
		select {
		case in <- fakeMsg{f.rank, round, append([]float64(nil), s...)}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	early := f.g.pending[f.rank]
	f.g.pending[f.rank] = nil
	for got := 0; got < f.g.n; {
		var m fakeMsg
		if len(early) > 0 {
			m, early = early[0], early[1:]
		} else {
			select {
			case m = <-f.g.inbox[f.rank]:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if m.round != round {
			f.g.pending[f.rank] = append(f.g.pending[f.rank], m)
			continue
		}
		if len(m.v) != len(s) {
			return fmt.Errorf("fake allgather: rank %d sent %d values, want %d", m.from, len(m.v), len(s))
		}
		copy(r[m.from*len(s):], m.v)
		got++
	}
	return nil
}

// rankRecords makes rank r's records: every rank runs the same ops, rank r
// taking (r+1)*base for each allreduce, so rank 0 is fastest; rank n-1 also
// ran sends nobody else did, and one op has a name outside OpNames.
func rankRecords(r, n int) []Record {
	l := New(Config{Enabled: true}, r, n)
	for i := range 3 {
		l.Append(Record{Op: AllReduce, Bytes: int64(100 * (i + 1)), Latency: time.Duration(r+1) * time.Millisecond})
	}
	l.Append(Record{Op: Broadcast, Bytes: 8, Latency: time.Duration(n-r) * time.Microsecond})
	if r == n-1 {
		l.Append(Record{Op: Send, Bytes: 8, Latency: time.Millisecond})
		l.Append(Record{Op: "custom_op", Bytes: 8, Latency: 2 * time.Millisecond})
	}
	return l.Records()
}

func TestStraggler(t *testing.T) {
	for n := 1; n <= 9; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			g := newFakeGroup(n)
			rows := make([][]StragglerRow, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rows[r], errs[r] = Straggler(t.Context(), g[r], rankRecords(r, n))
				}()
			}
			wg.Wait()
			for r := range n {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				check(t, r, n, rows[r])
			}
		})
	}
}

// check compares rows with a sequential reference built from every rank's
// records.
func check(t *testing.T, rank, n int, rows []StragglerRow) {
	t.Helper()
	totals := map[string][]time.Duration{}
	var order []string
	for _, op := range append(OpNames(), OtherOps) {
		for r := range n {
			for _, rec := range rankRecords(r, n) {
				name := rec.Op
				if !knownOp(name) {
					name = OtherOps
				}
				if name != op {
					continue
				}
				if totals[op] == nil {
					totals[op] = make([]time.Duration, n)
					order = append(order, op)
				}
				totals[op][r] += rec.Latency
			}
		}
	}
	if len(rows) != len(order) {
		t.Fatalf("rank %d: %d rows, want %d (%v)", rank, len(rows), len(order), order)
	}
	for i, row := range rows {
		if row.Op != order[i] {
			t.Errorf("rank %d row %d: op %q, want %q", rank, i, row.Op, order[i])
		}
		lat := totals[row.Op]
		min := lat[0]
		for _, d := range lat {
			min = minDur(min, d)
		}
		for r := range n {
			if row.Latency[r] != lat[r] || row.Effect[r] != lat[r]-min {
				t.Errorf("rank %d op %s: rank %d latency %v effect %v, want %v %v",
					rank, row.Op, r, row.Latency[r], row.Effect[r], lat[r], lat[r]-min)
			}
		}
		if row.Latency[row.FastestRank] != min {
			t.Errorf("rank %d op %s: fastest rank %d", rank, row.Op, row.FastestRank)
		}
		wantCount := 0
		for _, rec := range rankRecords(rank, n) {
			if rec.Op == row.Op || (row.Op == OtherOps && !knownOp(rec.Op)) {
				wantCount++
			}
		}
		if row.Count != wantCount {
			t.Errorf("rank %d op %s: count %d, want %d", rank, row.Op, row.Count, wantCount)
		}
	}
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

func knownOp(op string) bool {
	for _, o := range OpNames() {
		if o == op {
			return true
		}
	}
	return false
}

func TestLogSummaryStraggler(t *testing.T) {
	const n = 3
	g := newFakeGroup(n)
	out := make([]bytes.Buffer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		l := New(Config{Enabled: true, Straggler: r == 0}, r, n)
		for _, rec := range rankRecords(r, n) {
			l.Append(rec)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Rank 0 asks through its Config, the others through the argument.
			errs[r] = l.LogSummary(t.Context(), &out[r], g[r], r != 0)
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	golden(t, "straggler_rank2.txt", out[2].Bytes())
	if !strings.Contains(out[0].String(), "Straggler effect") {
		t.Errorf("rank 0 output lacks the straggler table:\n%s", out[0].String())
	}
}

type failGatherer struct{}

func (failGatherer) Rank() int                                 { return 1 }
func (failGatherer) Size() int                                 { return 2 }
func (failGatherer) AllGather(context.Context, any, any) error { return errBoom }

var errBoom = errors.New("boom")

func TestStragglerErrors(t *testing.T) {
	l := New(Config{Enabled: true, Straggler: true}, 0, 2)
	if err := l.LogSummary(t.Context(), &bytes.Buffer{}, nil, false); err == nil {
		t.Error("straggler without a Gatherer: no error")
	}
	_, err := Straggler(t.Context(), failGatherer{}, nil)
	if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("Straggler error = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g := newFakeGroup(2) // rank 1 never calls: rank 0 must return on ctx
	if _, err := Straggler(ctx, g[0], nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Straggler error = %v", err)
	}
}
