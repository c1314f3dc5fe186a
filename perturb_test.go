package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/elems"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport/tcp"
)

// Perturbed sequences (issue 20): every rank runs a random sequence of
// collectives, one rank's copy carrying one perturbation (a call skipped,
// an extra call, two calls swapped, another count, another root), and
// every rank must either return the right result or an error; never a nil
// with wrong data, never an error of another kind, never a hang.
//
// The rule. goccl matches collectives by order: a rank's i-th collective
// on a communicator takes sequence number i, which is part of every tag,
// and the first message of a call between two ranks carries a fingerprint
// of the call (op, count, dtype, reduction, root, group, sequence number).
// So calls meet by POSITION p, the index in each rank's own executed list,
// whatever the program meant by them. Let D be the first position at which
// the ranks' calls are not all identical in (collective, count, dtype,
// reduction, root), or at which some rank has no call (D is "none" when
// the lists are identical).
//
//   - p < D: all ranks made the same call. The expected result of each rank
//     is the sequential reference of that call over the inputs the ranks
//     actually passed at p. Those may belong to different user calls (a
//     skipped or swapped call identical to its neighbour): that is the
//     documented limit of order matching, not a defect; such trials are
//     counted and logged. A call at p < D returns nil with the expected
//     result, or an error: a rank that has finished call p can reach the
//     divergence and abort the communicator while a slower rank is still in
//     call p (logged). When there is no divergence at all, every call must
//     return nil.
//   - p >= D: a call that returns nil must leave the result this rank would
//     get if every rank had made this rank's call, with the inputs of this
//     rank's user call (the input of rank q for user call u is a function of
//     (q, u, element), so data of another user call does not pass for it).
//     One refinement, the same limit of order matching as before D: peers
//     whose call at p carries the same fingerprint may have passed the
//     inputs of their own user call at p; a result equal to that is
//     accepted and counted. Per collective the result checked is: the
//     buffer (all-reduce, broadcast: root's buffer unchanged; reduce: the
//     reduction on the root, the unchanged buffer elsewhere), the receive
//     buffer (all-gather, reduce-scatter, all-to-all, scatter, gather on
//     the root); nothing for a barrier or a gather's non-root. Guard bands
//     around every output, and every separate send buffer, must come back
//     untouched.
//   - Every error wraps goccl.ErrMismatch or goccl.ErrAborted.
//   - When every rank failed, at least one error wraps goccl.ErrMismatch.
//   - No call blocks longer than the communicator's timeout + 5 s.
//
// Not asserted but logged: the error classes, how long after the
// divergence each rank failed, and the trials in which a rank waited out
// the whole timeout although every rank was still calling at D.
//
// GOCCL_PERTURB_SEED=<seed> runs the one trial with that seed (on both
// transports) and, with -v, logs it in full; GOCCL_PERTURB_TRIALS=<n> runs
// n trials per transport instead of the default (a longer soak).

const (
	ptTimeout   = 3 * time.Second
	ptHangSlack = 5 * time.Second
	ptParallel  = 8 // trials run at once (most of the time is waiting)
)

type ptKind uint8

const (
	ptAllReduce ptKind = iota
	ptBroadcast
	ptReduce
	ptAllGather
	ptReduceScatter
	ptAllToAll
	ptBarrier
	ptGather
	ptScatter
	ptNumKinds
)

var ptKindNames = [...]string{"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllToAll", "Barrier", "Gather", "Scatter"}

// ptCall is one collective as a rank's program makes it.
type ptCall struct {
	kind  ptKind
	count int            // elements per rank (per block for the scaled collectives)
	dt    reduceop.DType // 0 for a barrier
	op    reduceop.Op    // 0 unless the call reduces
	root  int            // -1 unless the call is rooted
	uci   int            // user call index: its index in the base sequence (extra calls: len(base))
}

func (c ptCall) rooted() bool {
	return c.kind == ptBroadcast || c.kind == ptReduce || c.kind == ptGather || c.kind == ptScatter
}

func (c ptCall) reduces() bool {
	return c.kind == ptAllReduce || c.kind == ptReduce || c.kind == ptReduceScatter
}

// localNoop: the call moves no bytes (an unrooted collective of zero
// elements), so no peer ever sees its fingerprint.
func (c ptCall) localNoop() bool { return !c.rooted() && c.kind != ptBarrier && c.count == 0 }

// same reports whether two calls are identical in what goccl matches.
func (c ptCall) same(d ptCall) bool { c.uci, d.uci = 0, 0; return c == d }

func (c ptCall) String() string {
	if c.kind == ptBarrier {
		return fmt.Sprintf("Barrier()#u%d", c.uci)
	}
	s := fmt.Sprintf("%s(%d %v", ptKindNames[c.kind], c.count, c.dt)
	if c.reduces() {
		s += " " + c.op.String()
	}
	if c.rooted() {
		s += fmt.Sprintf(" root=%d", c.root)
	}
	return s + fmt.Sprintf(")#u%d", c.uci)
}

// ptVal is rank q's input element i for user call u: small integers, exact
// in every dtype and under every reduction over five ranks, and different
// for different user calls (3+q is invertible mod 13 for q < 5).
func ptVal(q, u, i int) float64 { return float64((q*5 + u*(3+q) + i*7) % 13) }

// ptDTypes are the dtypes trials draw from: the eight reduceop had when
// the trials were written, so that a seed still draws the same trial (and a
// bool could not hold ptVal's values). collectives_test.go covers the
// others.
var ptDTypes = []reduceop.DType{reduceop.Float32, reduceop.Float64, reduceop.Float16, reduceop.BFloat16,
	reduceop.Int8, reduceop.Uint8, reduceop.Int32, reduceop.Int64}

func ptDrawCall(rng *rand.Rand, n, uci int) ptCall {
	c := ptCall{kind: ptKind(rng.IntN(int(ptNumKinds))), root: -1, uci: uci}
	if c.kind == ptBarrier {
		return c
	}
	c.dt = ptDTypes[rng.IntN(len(ptDTypes))]
	c.count = ptDrawCount(rng)
	if c.reduces() {
		c.op = reduceop.Sum
		if rng.IntN(2) == 0 && reduceop.Check(reduceop.Max, c.dt) == nil {
			c.op = reduceop.Max
		}
	}
	if c.rooted() {
		c.root = rng.IntN(n)
	}
	return c
}

func ptDrawCount(rng *rand.Rand) int {
	if rng.IntN(6) == 0 {
		return 0
	}
	return 1 + rng.IntN(40)
}

// ptTrial is one drawn trial: the base sequence and every rank's copy.
type ptTrial struct {
	seed  uint64
	n     int
	base  []ptCall
	lists [][]ptCall
	prank int    // the perturbed rank
	pert  string // the perturbation, in words
}

func ptDraw(seed uint64) ptTrial {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	n := 2 + rng.IntN(4)
	length := 4 + rng.IntN(5)
	base := make([]ptCall, length)
	for i := range base {
		if i > 0 && rng.IntN(5) == 0 {
			base[i] = base[i-1] // the same call again: order matching cannot tell them apart
			base[i].uci = i
		} else {
			base[i] = ptDrawCall(rng, n, i)
		}
	}
	tr := ptTrial{seed: seed, n: n, base: base, prank: rng.IntN(n)}
	mine := slices.Clone(base)
	for tr.pert == "" {
		switch rng.IntN(5) {
		case 0:
			k := rng.IntN(length)
			tr.pert = fmt.Sprintf("skip call %d %v", k, mine[k])
			mine = slices.Delete(mine, k, k+1)
		case 1:
			k := rng.IntN(length + 1)
			extra := ptDrawCall(rng, n, length)
			if rng.IntN(3) == 0 { // a copy of a neighbour
				j := min(k, length-1)
				if k > 0 && rng.IntN(2) == 0 {
					j = k - 1
				}
				extra = base[j]
				extra.uci = length
			}
			tr.pert = fmt.Sprintf("extra call %v inserted at %d", extra, k)
			mine = slices.Insert(mine, k, extra)
		case 2:
			k := rng.IntN(length - 1)
			tr.pert = fmt.Sprintf("swap calls %d and %d", k, k+1)
			mine[k], mine[k+1] = mine[k+1], mine[k]
		case 3:
			var ks []int
			for i, c := range base {
				if c.kind != ptBarrier {
					ks = append(ks, i)
				}
			}
			if len(ks) == 0 {
				continue
			}
			k := ks[rng.IntN(len(ks))]
			old := mine[k].count
			for mine[k].count == old {
				mine[k].count = ptDrawCount(rng)
			}
			tr.pert = fmt.Sprintf("count of call %d %d -> %d", k, old, mine[k].count)
		case 4:
			var ks []int
			for i, c := range base {
				if c.rooted() {
					ks = append(ks, i)
				}
			}
			if len(ks) == 0 {
				continue
			}
			k := ks[rng.IntN(len(ks))]
			old := mine[k].root
			mine[k].root = (old + 1 + rng.IntN(n-1)) % n
			tr.pert = fmt.Sprintf("root of call %d %d -> %d", k, old, mine[k].root)
		}
	}
	tr.pert = fmt.Sprintf("rank %d: %s", tr.prank, tr.pert)
	tr.lists = make([][]ptCall, n)
	for q := range tr.lists {
		tr.lists[q] = base
	}
	tr.lists[tr.prank] = mine
	return tr
}

// divergence returns D, or -1 when the lists are identical.
func (tr ptTrial) divergence() int {
	for p := 0; ; p++ {
		have := 0
		for _, l := range tr.lists {
			if p < len(l) {
				have++
			}
		}
		if have == 0 {
			return -1
		}
		if have < tr.n {
			return p
		}
		for _, l := range tr.lists[1:] {
			if !l[p].same(tr.lists[0][p]) {
				return p
			}
		}
	}
}

func (tr ptTrial) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d ranks, %s\n", tr.seed, tr.n, tr.pert)
	fmt.Fprintf(&b, "  base:    %v\n", tr.base)
	fmt.Fprintf(&b, "  rank %d: %v", tr.prank, tr.lists[tr.prank])
	return b.String()
}

// ptOutcome is what one call returned.
type ptOutcome struct {
	ran        bool
	err        error
	res        []float64 // the output checked (nil: none)
	damage     []string  // guard bands or send buffers written
	start, end time.Time
}

// ptOut is a guarded output buffer (collectives_test.go), if the call has one.
type ptOut struct {
	g  guarded
	ok bool
}

func ptInput(dt reduceop.DType, q, u, n int) any {
	s := elems.Make(dt, n)
	for i := 0; i < n; i++ {
		elems.Set(s, i, ptVal(q, u, i))
	}
	return s
}

func ptRead(buf any, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = elems.Get(buf, i)
	}
	return out
}

func ptGuardsIntact(g guarded) bool {
	for i := 0; i < guard; i++ {
		if elems.Get(g.full, i) != g.poisonVal() || elems.Get(g.full, guard+g.n+i) != g.poisonVal() {
			return false
		}
	}
	return true
}

// ptExec makes call k on c and records what came back.
func ptExec(ctx context.Context, c *goccl.Comm, k ptCall) (o ptOutcome) {
	n, r := c.Size(), c.Rank()
	var out ptOut
	newOut := func(m int, fill bool) any {
		out = ptOut{g: newGuarded(k.dt, m), ok: true}
		if fill {
			for i := 0; i < m; i++ {
				out.g.set(i, ptVal(r, k.uci, i))
			}
		}
		return out.g.buf()
	}
	var send any
	var sendLen int
	newSend := func(m int) any {
		send, sendLen = ptInput(k.dt, r, k.uci, m), m
		return send
	}
	o.ran = true
	o.start = time.Now()
	switch k.kind {
	case ptAllReduce:
		o.err = c.AllReduce(ctx, newOut(k.count, true), k.op)
	case ptBroadcast:
		o.err = c.Broadcast(ctx, newOut(k.count, true), k.root)
	case ptReduce:
		o.err = c.Reduce(ctx, newOut(k.count, true), k.op, k.root)
	case ptAllGather:
		o.err = c.AllGather(ctx, newSend(k.count), newOut(k.count*n, false))
	case ptReduceScatter:
		o.err = c.ReduceScatter(ctx, newSend(k.count*n), newOut(k.count, false), k.op)
	case ptAllToAll:
		o.err = c.AllToAll(ctx, newSend(k.count*n), newOut(k.count*n, false))
	case ptBarrier:
		o.err = c.Barrier(ctx)
	case ptGather:
		var recv any
		if r == k.root {
			recv = newOut(k.count*n, false)
		}
		o.err = c.Gather(ctx, newSend(k.count), recv, k.root)
	case ptScatter:
		var s any
		if r == k.root {
			s = newSend(k.count * n)
		}
		o.err = c.Scatter(ctx, s, newOut(k.count, false), k.root)
	}
	o.end = time.Now()
	if out.ok {
		if !ptGuardsIntact(out.g) {
			o.damage = append(o.damage, "guard band of the output written")
		}
		o.res = ptRead(out.g.full, out.g.n+guard)[guard:]
	}
	if send != nil && !slices.Equal(ptRead(send, sendLen), ptRead(ptInput(k.dt, r, k.uci, sendLen), sendLen)) {
		o.damage = append(o.damage, "send buffer written")
	}
	return o
}

// ptExpect is rank r's result of call k when rank q passed the inputs of
// user call uci(q); nil: nothing to check.
func ptExpect(k ptCall, r, n int, uci func(q int) int) []float64 {
	v := func(q, i int) float64 { return ptVal(q, uci(q), i) }
	fold := func(i int) float64 {
		acc := v(0, i)
		for q := 1; q < n; q++ {
			if k.op == reduceop.Max {
				acc = max(acc, v(q, i))
			} else {
				acc += v(q, i)
			}
		}
		return acc
	}
	m := k.count
	var out []float64
	switch k.kind {
	case ptAllReduce:
		for i := 0; i < m; i++ {
			out = append(out, fold(i))
		}
	case ptBroadcast:
		for i := 0; i < m; i++ {
			out = append(out, v(k.root, i))
		}
	case ptReduce:
		for i := 0; i < m; i++ {
			if r == k.root {
				out = append(out, fold(i))
			} else {
				out = append(out, v(r, i))
			}
		}
	case ptAllGather:
		for q := 0; q < n; q++ {
			for i := 0; i < m; i++ {
				out = append(out, v(q, i))
			}
		}
	case ptReduceScatter:
		for i := 0; i < m; i++ {
			out = append(out, fold(r*m+i))
		}
	case ptAllToAll:
		for j := 0; j < n; j++ {
			for i := 0; i < m; i++ {
				out = append(out, v(j, r*m+i))
			}
		}
	case ptGather:
		if r != k.root {
			return nil
		}
		for q := 0; q < n; q++ {
			for i := 0; i < m; i++ {
				out = append(out, v(q, i))
			}
		}
	case ptScatter:
		for i := 0; i < m; i++ {
			out = append(out, v(k.root, r*m+i))
		}
	case ptBarrier:
		return nil
	}
	if out == nil {
		out = []float64{}
	}
	return out
}

// ptRun is a trial's outcome: every rank's calls.
type ptRun struct {
	tr    ptTrial
	out   [][]ptOutcome
	setup error
	hangs []string // calls that blocked past timeout + ptHangSlack
	wall  time.Duration
}

// ptRunTrial runs tr on communicators from mk, one goroutine per rank.
func ptRunTrial(tr ptTrial, mk func(tr ptTrial) ([]*goccl.Comm, error)) (run ptRun) {
	run.tr = tr
	t0 := time.Now()
	defer func() { run.wall = time.Since(t0) }()
	comms, err := mk(tr)
	if err != nil {
		run.setup = err
		return run
	}
	n := tr.n
	run.out = make([][]ptOutcome, n)
	cur := make([]atomic.Int64, n) // start of the call in progress (unix ns), 0 when none
	done := make(chan struct{})
	var wg sync.WaitGroup
	for q := range n {
		run.out[q] = make([]ptOutcome, len(tr.lists[q]))
		wg.Go(func() {
			for p, k := range tr.lists[q] {
				cur[q].Store(time.Now().UnixNano())
				o := ptExec(context.Background(), comms[q], k)
				cur[q].Store(0)
				run.out[q][p] = o // read only after wg.Wait
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	reported := make([]bool, n)
	var hangs []string
	var gaveUp <-chan time.Time
wait:
	for {
		select {
		case <-done:
			break wait
		case <-gaveUp:
			// Stuck even after Abort: leave the goroutines behind.
			run.hangs = append(hangs, "the ranks did not return even after Abort; trial abandoned")
			return run
		case <-tick.C:
			for q := range n {
				s := cur[q].Load()
				if s == 0 || reported[q] || time.Since(time.Unix(0, s)) < ptTimeout+ptHangSlack {
					continue
				}
				reported[q] = true
				hangs = append(hangs, fmt.Sprintf("rank %d blocked in a call for more than %v", q, ptTimeout+ptHangSlack))
				if gaveUp == nil {
					for _, c := range comms {
						c.Abort(errors.New("perturb test: call blocked past its timeout"))
					}
					gaveUp = time.After(10 * time.Second)
				}
			}
		}
	}
	run.hangs = hangs
	var cw sync.WaitGroup
	for _, c := range comms {
		cw.Go(func() { c.Close() })
	}
	cw.Wait()
	return run
}

// ptStats gathers what the test logs over all its trials.
type ptStats struct {
	mu              sync.Mutex
	trials          int
	noDivergence    int
	classes         map[string]int // every error, by class
	firstClasses    map[string]int // each failed rank's first error, by class
	errBeforeD      []string
	orderLimit      []string // trials where ranks met with inputs of different user calls before D
	orderLimitAfter []string // the same, accepted after D
	delays          []time.Duration
	waitedOut       []string // a rank waited out the timeout though every rank was calling at D
	waitedOutEnded  int      // ... where some rank had no call at D (expected to wait)
	wall            []time.Duration
}

func ptClass(err error) string {
	var parts []string
	for _, c := range []struct {
		name string
		err  error
	}{{"Mismatch", goccl.ErrMismatch}, {"Aborted", goccl.ErrAborted}, {"Timeout", goccl.ErrTimeout}, {"PeerClosed", goccl.ErrPeerClosed}, {"Protocol", goccl.ErrProtocol}, {"Invalid", goccl.ErrInvalid}} {
		if errors.Is(err, c.err) {
			parts = append(parts, c.name)
		}
	}
	var rep *goccl.PeerReport
	if errors.As(err, &rep) {
		parts = append(parts, "relayed")
	}
	if len(parts) == 0 {
		return "other"
	}
	return strings.Join(parts, "+")
}

// ptCheck applies the rule to one trial's outcome.
func ptCheck(t *testing.T, run ptRun, st *ptStats) {
	tr := run.tr
	if run.setup != nil {
		t.Fatalf("%v\nsetup: %v", tr, run.setup)
	}
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	for _, h := range run.hangs {
		fail("HANG: %s", h)
	}
	n, D := tr.n, tr.divergence()
	uciAt := func(q, p int) int { return tr.lists[q][p].uci }
	limitBefore, limitAfter := false, false
	anyMismatch, allFailed := false, true
	var errBefore []string
	for q := range n {
		failed := false
		for p, k := range tr.lists[q] {
			o := run.out[q][p]
			where := fmt.Sprintf("rank %d position %d (%v)", q, p, k)
			if !o.ran {
				fail("HANG: %s never returned", where)
				continue
			}
			for _, d := range o.damage {
				fail("WRONG-DATA: %s: %s (err %v)", where, d, o.err)
			}
			if o.err != nil {
				failed = true
				if errors.Is(o.err, goccl.ErrMismatch) {
					anyMismatch = true
				}
				if !errors.Is(o.err, goccl.ErrMismatch) && !errors.Is(o.err, goccl.ErrAborted) {
					fail("ERROR-CLASS: %s returned an error that is neither ErrMismatch nor ErrAborted [%s]: %v", where, ptClass(o.err), o.err)
				}
				if D < 0 {
					fail("SPURIOUS-ERROR: %s failed although every rank made the same calls: %v", where, o.err)
				} else if p < D {
					errBefore = append(errBefore, fmt.Sprintf("%s [%s]", where, ptClass(o.err)))
				}
				continue
			}
			if D < 0 || p < D {
				want := ptExpect(k, q, n, func(j int) int { return uciAt(j, p) })
				if !slices.Equal(o.res, want) {
					fail("WRONG-DATA: %s returned nil with wrong data before the divergence: got %v, want %v", where, o.res, want)
				}
				continue
			}
			want := ptExpect(k, q, n, func(int) int { return k.uci })
			if slices.Equal(o.res, want) {
				continue
			}
			// Peers that made a call with the same fingerprint at p may
			// have passed their own user call's inputs (order matching).
			alt := ptExpect(k, q, n, func(j int) int {
				if p < len(tr.lists[j]) && tr.lists[j][p].same(k) {
					return uciAt(j, p)
				}
				return k.uci
			})
			if slices.Equal(o.res, alt) {
				limitAfter = true
				continue
			}
			fail("WRONG-DATA: %s returned nil with wrong data after the divergence: got %v, want %v (or, order-matched, %v)", where, o.res, want, alt)
		}
		if !failed {
			allFailed = false
		}
	}
	if allFailed && !anyMismatch {
		fail("NO-MISMATCH: every rank failed but no error wraps ErrMismatch")
	}
	for p := 0; p < D || D < 0 && p < len(tr.lists[0]); p++ {
		for q := 1; q < n; q++ {
			if uciAt(q, p) != uciAt(0, p) {
				limitBefore = true
			}
		}
	}

	// Timing: from the divergence (the first rank to reach D, or to run out
	// of calls there) to each rank's first error.
	var tD time.Time
	someEnded := false
	if D >= 0 {
		for q := range n {
			var at time.Time
			switch {
			case D < len(tr.lists[q]):
				at = run.out[q][D].start
			case len(tr.lists[q]) > 0:
				at = run.out[q][len(tr.lists[q])-1].end
				someEnded = true
			default:
				someEnded = true
				continue
			}
			if !at.IsZero() && (tD.IsZero() || at.Before(tD)) {
				tD = at
			}
		}
	}
	var delays []time.Duration
	var waited []string
	firsts := map[string]int{}
	classes := map[string]int{}
	for q := range n {
		first := true
		for p := range tr.lists[q] {
			o := run.out[q][p]
			if o.err == nil {
				continue
			}
			classes[ptClass(o.err)]++
			if !first {
				continue
			}
			first = false
			firsts[ptClass(o.err)]++
			if tD.IsZero() {
				continue
			}
			d := o.end.Sub(tD)
			delays = append(delays, d)
			if errors.Is(o.err, goccl.ErrTimeout) {
				if someEnded {
					waited = append(waited, "")
				} else {
					noop := ""
					for j := range n {
						if tr.lists[j][D].localNoop() {
							noop = fmt.Sprintf(" (rank %d's call at D, %v, moves no bytes)", j, tr.lists[j][D])
							break
						}
					}
					waited = append(waited, fmt.Sprintf("seed %d (%s): rank %d failed %v after the divergence at position %d with %s%s",
						tr.seed, tr.pert, q, d.Round(time.Millisecond), D, ptClass(o.err), noop))
				}
			}
		}
	}

	st.mu.Lock()
	st.trials++
	if D < 0 {
		st.noDivergence++
	}
	for k, v := range classes {
		st.classes[k] += v
	}
	for k, v := range firsts {
		st.firstClasses[k] += v
	}
	if len(errBefore) > 0 {
		st.errBeforeD = append(st.errBeforeD, fmt.Sprintf("seed %d (%s, D=%d): %s", tr.seed, tr.pert, D, strings.Join(errBefore, "; ")))
	}
	if limitBefore {
		st.orderLimit = append(st.orderLimit, fmt.Sprintf("seed %d (%s)", tr.seed, tr.pert))
	}
	if limitAfter {
		st.orderLimitAfter = append(st.orderLimitAfter, fmt.Sprintf("seed %d (%s)", tr.seed, tr.pert))
	}
	st.delays = append(st.delays, delays...)
	for _, w := range waited {
		if w == "" {
			st.waitedOutEnded++
		} else {
			st.waitedOut = append(st.waitedOut, w)
		}
	}
	st.wall = append(st.wall, run.wall)
	st.mu.Unlock()

	if len(fails) > 0 || testing.Verbose() && os.Getenv("GOCCL_PERTURB_SEED") != "" {
		msg := fmt.Sprintf("%v\nD = %d\n%s", tr, D, ptDump(run))
		if len(fails) > 0 {
			t.Errorf("%s\nFAILURES:\n  %s", msg, strings.Join(fails, "\n  "))
		} else {
			t.Log(msg)
		}
	}
}

// ptDump lists what every rank called and got.
func ptDump(run ptRun) string {
	var b strings.Builder
	for q, l := range run.tr.lists {
		fmt.Fprintf(&b, "rank %d:\n", q)
		for p, k := range l {
			o := run.out[q][p]
			got := "nil"
			switch {
			case !o.ran:
				got = "did not return"
			case o.err != nil:
				got = fmt.Sprintf("[%s] %v", ptClass(o.err), o.err)
			}
			fmt.Fprintf(&b, "  %d %v (%v): %s\n", p, k, o.end.Sub(o.start).Round(time.Millisecond), got)
		}
	}
	return b.String()
}

func ptSeeds(first uint64, count int) []uint64 {
	if s := os.Getenv("GOCCL_PERTURB_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			panic("GOCCL_PERTURB_SEED: " + err.Error())
		}
		return []uint64{v}
	}
	if s := os.Getenv("GOCCL_PERTURB_TRIALS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			panic("GOCCL_PERTURB_TRIALS: want a positive number, got " + s)
		}
		count = v
	}
	seeds := make([]uint64, count)
	for i := range seeds {
		seeds[i] = first + uint64(i)
	}
	return seeds
}

// ptRunAll runs the trials of seeds, ptParallel at a time, then checks each
// in a subtest named by its seed, and logs the statistics.
func ptRunAll(t *testing.T, seeds []uint64, mk func(tr ptTrial) ([]*goccl.Comm, error)) {
	start := time.Now()
	runs := make([]ptRun, len(seeds))
	sem := make(chan struct{}, ptParallel)
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			runs[i] = ptRunTrial(ptDraw(seed), mk)
		})
	}
	wg.Wait()
	st := &ptStats{classes: map[string]int{}, firstClasses: map[string]int{}}
	for i, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { ptCheck(t, runs[i], st) })
	}
	ptLogStats(t, st, time.Since(start))
}

func ptLogStats(t *testing.T, st *ptStats, wall time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "%d trials in %v (%d without divergence: identical calls swapped)\n", st.trials, wall.Round(time.Millisecond), st.noDivergence)
	fmt.Fprintf(&b, "error classes, every failed call: %s\n", ptMap(st.classes))
	fmt.Fprintf(&b, "error classes, each failed rank's first error: %s\n", ptMap(st.firstClasses))
	fmt.Fprintf(&b, "order matching met inputs of different user calls before D in %d trials: %v\n", len(st.orderLimit), st.orderLimit)
	fmt.Fprintf(&b, "... and after D (accepted, same fingerprint at that position) in %d trials: %v\n", len(st.orderLimitAfter), st.orderLimitAfter)
	fmt.Fprintf(&b, "errors before D in %d trials:\n", len(st.errBeforeD))
	for _, s := range st.errBeforeD {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	if len(st.delays) > 0 {
		d := slices.Clone(st.delays)
		slices.Sort(d)
		buckets := map[string]int{}
		for _, x := range d {
			switch {
			case x < 100*time.Millisecond:
				buckets["<100ms"]++
			case x < time.Second:
				buckets["100ms-1s"]++
			case x < ptTimeout:
				buckets["1s-timeout"]++
			default:
				buckets[">=timeout"]++
			}
		}
		fmt.Fprintf(&b, "divergence -> first error of each failed rank: %d ranks, median %v, p90 %v, max %v; %s\n", len(d),
			d[len(d)/2].Round(time.Millisecond), d[len(d)*9/10].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond), ptMap(buckets))
	}
	fmt.Fprintf(&b, "ranks that failed with a timeout where some rank had no call at D (expected): %d\n", st.waitedOutEnded)
	fmt.Fprintf(&b, "ranks that waited out the timeout although every rank was calling at D: %d\n", len(st.waitedOut))
	for _, s := range st.waitedOut {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	w := slices.Clone(st.wall)
	slices.Sort(w)
	if len(w) > 0 {
		fmt.Fprintf(&b, "trial wall time: median %v, max %v\n", w[len(w)/2].Round(time.Millisecond), w[len(w)-1].Round(time.Millisecond))
	}
	t.Log(b.String())
}

func ptMap(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func TestPerturbedSequences(t *testing.T) {
	ptRunAll(t, ptSeeds(1, 60), func(tr ptTrial) ([]*goccl.Comm, error) {
		return goccl.NewLocal(tr.n, goccl.WithTimeout(ptTimeout))
	})
}

func TestPerturbedSequencesTCP(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	ptRunAll(t, ptSeeds(1001, 15), func(tr ptTrial) ([]*goccl.Comm, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		kv := testutil.NewKV()
		comms := make([]*goccl.Comm, tr.n)
		errs := make([]error, tr.n)
		var wg sync.WaitGroup
		for q := range tr.n {
			wg.Go(func() {
				ep, err := tcp.Connect(ctx, tcp.Config{Rank: q, Size: tr.n, JobID: fmt.Sprintf("perturb-%d", tr.seed),
					KV: kv, ListenHost: "127.0.0.1", Logger: quiet})
				if err != nil {
					errs[q] = err
					return
				}
				if comms[q], errs[q] = goccl.New(ep, goccl.WithTimeout(ptTimeout)); errs[q] != nil {
					ep.Close()
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			for _, c := range comms {
				if c != nil {
					c.Close()
				}
			}
			return nil, err
		}
		return comms, nil
	})
}
