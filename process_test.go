package goccl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/internal/elems"
	"github.com/goccl/goccl/reduceop"
)

// The process suite runs the collective suite again with every rank in
// its own process, connected over TCP on the loopback. The test binary
// re-executes itself once per rank with torchrun's variables (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
// the marker variable envProcRank; in such a child TestProcessSuiteTCP
// runs one rank's side of the suite (or of BenchmarkAllReduceTCP) instead
// of launching ranks.

const (
	envProcRank = "GOCCL_TEST_PROCESS_RANK" // set in a child: the rank it plays
	envProcMode = "GOCCL_TEST_PROCESS_MODE" // "suite" or "bench"
	envBenchN   = "GOCCL_TEST_BENCH_N"      // bench: allreduces to time
	envBenchAlg = "GOCCL_TEST_BENCH_ALGO"   // bench: algorithm
	envBenchLen = "GOCCL_TEST_BENCH_BYTES"  // bench: message size in bytes
	envBenchChk = "GOCCL_TEST_BENCH_CHECK"  // bench: "false" turns the mismatch check off
)

// Benchmark rank 0's handshake with the parent, one line each on its
// stdout and stdin.
const (
	benchReady = "GOCCL-BENCH-READY"
	benchGo    = "GO"
	benchDone  = "GOCCL-BENCH-DONE"
)

func TestProcessSuiteTCP(t *testing.T) {
	if os.Getenv(envProcRank) != "" {
		if os.Getenv(envProcMode) == "bench" {
			benchRank(t)
		} else {
			suiteRank(t)
		}
		return
	}
	sizes := []int{2, 3, 5}
	if testing.Short() {
		sizes = []int{3}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			j := startJob(t, n, "suite", nil, nil)
			j.wait(t, 2*time.Minute)
		})
	}
}

// ---- the parent side ----

// job is a set of rank processes.
type job struct {
	cmds []*exec.Cmd
	outs []*testutil.Buffer
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// childEnv is the parent's environment without anything that would make
// a child discover another launcher or transport first.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OMPI_COMM_WORLD_") || strings.HasPrefix(kv, "GOCCL_TRANSPORT=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// startJob starts n ranks of this test binary in mode. extra is added to
// every child's environment; rank0, if not nil, may adjust rank 0's
// command (pipes) before it starts.
func startJob(tb testing.TB, n int, mode string, extra []string, rank0 func(cmd *exec.Cmd) error) *job {
	tb.Helper()
	port := freePort(tb)
	j := &job{}
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestProcessSuiteTCP$", "-test.count=1")
		cmd.Env = append(childEnv(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GOCCL_TRANSPORT=tcp",
			envProcRank+"="+strconv.Itoa(r), envProcMode+"="+mode)
		cmd.Env = append(cmd.Env, extra...)
		out := &testutil.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if r == 0 && rank0 != nil {
			if err := rank0(cmd); err != nil {
				j.kill()
				tb.Fatal(err)
			}
		}
		if err := cmd.Start(); err != nil {
			j.kill()
			tb.Fatalf("start rank %d: %v", r, err)
		}
		j.cmds = append(j.cmds, cmd)
		j.outs = append(j.outs, out)
	}
	return j
}

// kill ends every rank that was started (a no-op for those that exited).
func (j *job) kill() {
	for _, c := range j.cmds {
		if c.Process != nil {
			c.Process.Kill()
		}
	}
}

// wait waits for every rank to exit and fails the test if one failed.
func (j *job) wait(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	if err := j.finish(timeout); err != nil {
		tb.Fatal(err)
	}
}

// finish waits for every rank to exit. On the first failure, or when
// timeout passes, it kills the others and returns an error holding the
// output of every rank that failed by itself (every rank's on a timeout).
func (j *job) finish(timeout time.Duration) error {
	done := make(chan int, len(j.cmds))
	errs := make([]error, len(j.cmds))
	for r, c := range j.cmds {
		go func() {
			errs[r] = c.Wait()
			done <- r
		}()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var order []int // ranks that failed, in the order they exited
	killed := false
	for left := len(j.cmds); left > 0; left-- {
		select {
		case r := <-done:
			if errs[r] == nil {
				continue
			}
			if ee, ok := errs[r].(*exec.ExitError); killed && ok && !ee.Exited() {
				continue // killed by us
			}
			order = append(order, r)
			if !killed {
				killed = true
				j.kill()
			}
		case <-timer.C:
			j.kill()
			for range left {
				<-done
			}
			var b strings.Builder
			for r, o := range j.outs {
				fmt.Fprintf(&b, "---- rank %d (%v) ----\n%s\n", r, errs[r], o)
			}
			return fmt.Errorf("ranks still running after %v, killed them all\n%s", timeout, b.String())
		}
	}
	if len(order) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ranks %v of %d failed; the others were killed.\n", order, len(j.cmds))
	for _, r := range order {
		fmt.Fprintf(&b, "---- rank %d (%v) ----\n%s\n", r, errs[r], j.outs[r])
	}
	return errors.New(b.String())
}

// ---- the rank side ----

// rankComm joins the job the parent described in the environment.
func rankComm(t *testing.T, ctx context.Context, opts ...goccl.Option) *goccl.Comm {
	t.Helper()
	c, err := goccl.Init(ctx, append([]goccl.Option{goccl.WithTimeout(30 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("rank %s: init: %v", os.Getenv("RANK"), err)
	}
	return c
}

// must fails the rank naming the case.
func must(t *testing.T, c *goccl.Comm, name string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("rank %d of %d: %s: %v", c.Rank(), c.Size(), name, err)
	}
}

// checkNamed compares a guarded result with want, guards included.
func checkNamed(t *testing.T, c *goccl.Comm, name string, g guarded, want []float64) {
	t.Helper()
	g.checkGuards(t, fmt.Sprintf("rank %d: %s", c.Rank(), name))
	must(t, c, name, check(g, want))
}

func fill(g guarded, op reduceop.Op, r, lo int) {
	for i := 0; i < g.n; i++ {
		g.set(i, val(op, r, lo+i))
	}
}

// bigCount is a float32 allreduce of a little over 1 MiB.
const bigCount = 1<<18 + 3

func suiteRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	c := rankComm(t, ctx)
	defer c.Close()
	n, me := c.Size(), c.Rank()
	progress := func(what string) { fmt.Fprintf(os.Stderr, "rank %d: %s\n", me, what) }

	// References are the same for every algorithm: compute them once.
	type refKey struct {
		dt  reduceop.DType
		op  reduceop.Op
		cnt int
	}
	refs := map[refKey][]float64{}
	ref := func(dt reduceop.DType, op reduceop.Op, lo, cnt int) []float64 {
		if lo != 0 {
			return reference(dt, op, n, span(lo, cnt))
		}
		k := refKey{dt, op, cnt}
		if w, ok := refs[k]; ok {
			return w
		}
		w := reference(dt, op, n, span(0, cnt))
		refs[k] = w
		return w
	}

	sizes := suiteSizes{
		allReduce: append(counts(n), bigCount),
		allReduceCases: func(cnt int) []caseSpec {
			cases := []caseSpec{{reduceop.Float32, reduceop.Sum}, {reduceop.Int64, reduceop.Sum}}
			switch cnt {
			case 13, n + 1:
				cases = reductionCases()
			case bigCount:
				cases = cases[:1]
			}
			return cases
		},
		roots:        span(0, n),
		rootCounts:   []int{0, 1, 13, 1031},
		gatherBlocks: []int{0, 1, 7},
		blocks:       []int{0, 1, 5, 257},
		scatterCases: []caseSpec{{reduceop.Float32, reduceop.Sum}, {reduceop.Float32, reduceop.Avg}, {reduceop.BFloat16, reduceop.Avg}, {reduceop.Int8, reduceop.Max}},
		ref:          ref,
	}
	for _, a := range algo.Algorithms {
		must(t, c, "set_algorithm "+string(a), c.SetAlgorithm(a))
		progress("algorithm " + string(a))
		collectiveSuite(t, ctx, c, a, sizes)
		if algo.Implements(a, algo.AllToAll) {
			allToAllSplit(t, ctx, c, "alltoall_split/"+string(a))
		}
		if algo.Implements(a, algo.AllGather) {
			allGatherList(t, ctx, c, "allgather_list/"+string(a))
		}
		if algo.Implements(a, algo.ReduceScatter) {
			reduceScatterList(t, ctx, c, "reducescatter_list/"+string(a))
		}
	}

	// The rest run once, on the cost model's choices.
	must(t, c, "set_algorithm cost model", c.SetAlgorithm(""))
	progress("composites")
	sendRecvRing(t, ctx, c)
	must(t, c, "barrier", c.Barrier(ctx))
	must(t, c, "monitored_barrier (all present)", c.MonitoredBarrier(ctx, 20*time.Second, true))
	must(t, c, "monitored_barrier (all present, first missing)", c.MonitoredBarrier(ctx, 20*time.Second, false))
	coalesced(t, ctx, c)
	objects(t, ctx, c)
	groups(t, ctx, c)
	asyncOverlap(t, ctx, c)
	must(t, c, "final barrier", c.Barrier(ctx))
	progress("done")
}

// suiteSizes are what one pass of collectiveSuite runs: the allreduce
// counts and the cases of each, the roots and counts of broadcast and
// reduce, the blocks of gather and scatter, the blocks of allgather,
// reduce-scatter and all-to-all, the reduce-scatter cases, and the
// reference (ref(dt, op, lo, cnt): elements lo.. of the reduction).
type suiteSizes struct {
	allReduce      []int
	allReduceCases func(cnt int) []caseSpec
	roots          []int
	rootCounts     []int
	gatherBlocks   []int
	blocks         []int
	scatterCases   []caseSpec
	ref            func(dt reduceop.DType, op reduceop.Op, lo, cnt int) []float64
}

// collectiveSuite runs every collective that algorithm a implements ("":
// every collective, on the cost model's choices) against the reference,
// at sz's sizes.
func collectiveSuite(t *testing.T, ctx context.Context, c *goccl.Comm, a algo.Algorithm, sz suiteSizes) {
	n, me := c.Size(), c.Rank()
	runs := func(coll algo.Collective) bool { return a == "" || algo.Implements(a, coll) }
	if runs(algo.AllReduce) {
		for _, cnt := range sz.allReduce {
			for _, cs := range sz.allReduceCases(cnt) {
				name := fmt.Sprintf("allreduce/%s/count=%d/%v/%v", a, cnt, cs.dt, cs.op)
				g := newGuarded(cs.dt, cnt)
				fill(g, cs.op, me, 0)
				must(t, c, name, c.AllReduce(ctx, g.buf(), cs.op))
				checkNamed(t, c, name, g, sz.ref(cs.dt, cs.op, 0, cnt))
			}
		}
	}
	for _, root := range sz.roots {
		for _, cnt := range sz.rootCounts {
			if runs(algo.Broadcast) {
				name := fmt.Sprintf("broadcast/%s/count=%d/root=%d", a, cnt, root)
				g := newGuarded(reduceop.Int32, cnt)
				fill(g, reduceop.Sum, me, 0)
				must(t, c, name, c.Broadcast(ctx, g.buf(), root))
				want := make([]float64, cnt)
				for i := range want {
					want[i] = val(reduceop.Sum, root, i)
				}
				checkNamed(t, c, name, g, want)
			}
			if runs(algo.Reduce) {
				name := fmt.Sprintf("reduce/%s/count=%d/root=%d", a, cnt, root)
				g := newGuarded(reduceop.Float64, cnt)
				fill(g, reduceop.Sum, me, 0)
				must(t, c, name, c.Reduce(ctx, g.buf(), reduceop.Sum, root))
				if me == root {
					checkNamed(t, c, name, g, sz.ref(reduceop.Float64, reduceop.Sum, 0, cnt))
				} else {
					mine := make([]float64, cnt)
					for i := range mine {
						mine[i] = val(reduceop.Sum, me, i)
					}
					checkNamed(t, c, name+" (non-root buffer unchanged)", g, mine)
				}
			}
		}
		if runs(algo.Gather) || runs(algo.Scatter) {
			for _, m := range sz.gatherBlocks {
				gatherScatter(t, ctx, c, fmt.Sprintf("%s/block=%d/root=%d", a, m, root), m, root)
			}
		}
	}
	for _, m := range sz.blocks {
		if runs(algo.AllGather) {
			name := fmt.Sprintf("allgather/%s/block=%d", a, m)
			send := make([]int64, m)
			for i := range send {
				send[i] = int64(val(reduceop.Sum, me, i))
			}
			g := newGuarded(reduceop.Int64, n*m)
			must(t, c, name, c.AllGather(ctx, send, g.buf()))
			want := make([]float64, n*m)
			for i := range want {
				want[i] = val(reduceop.Sum, i/m, i%m)
			}
			checkNamed(t, c, name, g, want)
		}
		if runs(algo.ReduceScatter) {
			for _, cs := range sz.scatterCases {
				name := fmt.Sprintf("reducescatter/%s/block=%d/%v/%v", a, m, cs.dt, cs.op)
				send := elems.Make(cs.dt, n*m)
				for i := 0; i < n*m; i++ {
					elems.Set(send, i, val(cs.op, me, i))
				}
				g := newGuarded(cs.dt, m)
				must(t, c, name, c.ReduceScatter(ctx, send, g.buf(), cs.op))
				checkNamed(t, c, name, g, sz.ref(cs.dt, cs.op, me*m, m))
			}
		}
		if runs(algo.AllToAll) {
			name := fmt.Sprintf("alltoall/%s/block=%d", a, m)
			send := make([]int64, n*m)
			for i := range send {
				send[i] = int64(me*1_000_000 + i)
			}
			g := newGuarded(reduceop.Int64, n*m)
			must(t, c, name, c.AllToAll(ctx, send, g.buf()))
			want := make([]float64, n*m)
			for i := range want {
				want[i] = float64((i/m)*1_000_000 + me*m + i%m)
			}
			checkNamed(t, c, name, g, want)
		}
	}
	if runs(algo.Barrier) {
		must(t, c, "barrier/"+string(a), c.Barrier(ctx))
	}
}

func gatherScatter(t *testing.T, ctx context.Context, c *goccl.Comm, what string, m, root int) {
	n, me := c.Size(), c.Rank()
	send := make([]uint8, m)
	for i := range send {
		send[i] = uint8(me*10 + i)
	}
	var g guarded
	var recv []uint8
	if me == root {
		g = newGuarded(reduceop.Uint8, n*m)
		recv = g.buf().([]uint8)
	}
	must(t, c, "gather/"+what, c.Gather(ctx, send, recv, root))
	if me == root {
		want := make([]float64, n*m)
		for i := range want {
			want[i] = float64((i/m)*10 + i%m)
		}
		checkNamed(t, c, "gather/"+what, g, want)
	}
	got := newGuarded(reduceop.Uint8, m)
	must(t, c, "scatter/"+what, c.Scatter(ctx, recv, got.buf(), root))
	want := make([]float64, m)
	for i := range want {
		want[i] = float64(send[i])
	}
	checkNamed(t, c, "scatter/"+what, got, want)
}

// allToAllSplit: rank r sends (r+j)%3 elements to rank j.
func allToAllSplit(t *testing.T, ctx context.Context, c *goccl.Comm, name string) {
	n, r := c.Size(), c.Rank()
	sc, rc := make([]int, n), make([]int, n)
	var send, recv []float64
	for j := 0; j < n; j++ {
		sc[j], rc[j] = (r+j)%3, (j+r)%3
		for i := 0; i < sc[j]; i++ {
			send = append(send, float64(r*100+j*10+i))
		}
		recv = append(recv, make([]float64, rc[j])...)
	}
	must(t, c, name, c.AllToAllSplit(ctx, send, sc, recv, rc))
	k := 0
	for j := 0; j < n; j++ {
		for i := 0; i < rc[j]; i++ {
			if want := float64(j*100 + r*10 + i); recv[k] != want {
				t.Fatalf("rank %d: %s: from rank %d element %d = %v, want %v", r, name, j, i, recv[k], want)
			}
			k++
		}
	}
}

func allGatherList(t *testing.T, ctx context.Context, c *goccl.Comm, name string) {
	n, me := c.Size(), c.Rank()
	lens := uneven(n)
	send := make([]float32, lens[me])
	for i := range send {
		send[i] = float32(val(reduceop.Sum, me, i))
	}
	recv := make([]any, n)
	for r := range recv {
		recv[r] = make([]float32, lens[r])
	}
	must(t, c, name, c.AllGatherList(ctx, send, recv))
	for r := range recv {
		for i, v := range recv[r].([]float32) {
			if float64(v) != val(reduceop.Sum, r, i) {
				t.Fatalf("rank %d: %s: recv[%d][%d] = %v, want %v", me, name, r, i, v, val(reduceop.Sum, r, i))
			}
		}
	}
}

func reduceScatterList(t *testing.T, ctx context.Context, c *goccl.Comm, name string) {
	n, me := c.Size(), c.Rank()
	lens := uneven(n)
	send := make([]any, n)
	off, lo := 0, 0
	for r := range send {
		s := make([]int32, lens[r])
		for i := range s {
			s[i] = int32(val(reduceop.Sum, me, off+i))
		}
		send[r] = s
		if r == me {
			lo = off
		}
		off += lens[r]
	}
	recv := make([]int32, lens[me])
	must(t, c, name, c.ReduceScatterList(ctx, send, recv, reduceop.Sum))
	want := reference(reduceop.Int32, reduceop.Sum, n, span(lo, lens[me]))
	for i, v := range recv {
		if float64(v) != want[i] {
			t.Fatalf("rank %d: %s: recv[%d] = %v, want %v", me, name, i, v, want[i])
		}
	}
}

// sendRecvRing passes messages around the ring: two tags received in the
// opposite order to the sends, and one large message.
func sendRecvRing(t *testing.T, ctx context.Context, c *goccl.Comm) {
	n, me := c.Size(), c.Rank()
	next, prev := (me+1)%n, (me+n-1)%n
	w1 := c.SendAsync(ctx, []int32{int32(me)}, next, 1)
	w2 := c.SendAsync(ctx, []int32{int32(me + 100)}, next, 2)
	b2, b1 := make([]int32, 1), make([]int32, 1)
	must(t, c, "recv tag 2", c.Recv(ctx, b2, prev, 2))
	must(t, c, "recv tag 1", c.Recv(ctx, b1, prev, 1))
	must(t, c, "send tags 1 and 2", errors.Join(w1.Wait(ctx), w2.Wait(ctx)))
	if b1[0] != int32(prev) || b2[0] != int32(prev+100) {
		t.Fatalf("rank %d: send/recv ring: got %d, %d from %d", me, b1[0], b2[0], prev)
	}
	big := make([]float64, 100_003)
	for i := range big {
		big[i] = float64(me*1_000_000 + i)
	}
	got := make([]float64, len(big))
	rw := c.RecvAsync(ctx, got, prev, 3)
	must(t, c, "send large", c.Send(ctx, big, next, 3))
	must(t, c, "recv large", rw.Wait(ctx))
	for i, v := range got {
		if v != float64(prev*1_000_000+i) {
			t.Fatalf("rank %d: send/recv large: element %d = %v from %d", me, i, v, prev)
		}
	}
}

func coalesced(t *testing.T, ctx context.Context, c *goccl.Comm) {
	n, me := c.Size(), c.Rank()
	sum := float32(n * (n - 1) / 2)
	a, b := []float32{1, 2}, []float32{float32(me)}
	must(t, c, "allreduce_coalesced", c.AllReduceCoalesced(ctx, []any{a, b}, reduceop.Sum))
	if !slices.Equal(a, []float32{float32(n), float32(2 * n)}) || b[0] != sum {
		t.Fatalf("rank %d: allreduce_coalesced: %v %v", me, a, b)
	}
	x, y := []int32{int32(me)}, []int32{int32(10 * me), 1}
	gx, gy := make([]int32, n), make([]int32, 2*n)
	must(t, c, "allgather_coalesced", c.AllGatherCoalesced(ctx, []any{x, y}, []any{gx, gy}))
	for r := 0; r < n; r++ {
		if gx[r] != int32(r) || gy[2*r] != int32(10*r) || gy[2*r+1] != 1 {
			t.Fatalf("rank %d: allgather_coalesced: %v %v", me, gx, gy)
		}
	}
}

type procMsg struct {
	Name string
	Vals []int
}

func objects(t *testing.T, ctx context.Context, c *goccl.Comm) {
	n, me := c.Size(), c.Rank()
	mine := procMsg{Name: fmt.Sprint("rank", me), Vals: make([]int, me)}
	all, err := goccl.AllGatherObject(ctx, c, mine)
	must(t, c, "all_gather_object", err)
	if len(all) != n {
		t.Fatalf("rank %d: all_gather_object: %d objects", me, len(all))
	}
	for r, o := range all {
		if o.Name != fmt.Sprint("rank", r) || len(o.Vals) != r {
			t.Fatalf("rank %d: all_gather_object[%d] = %+v", me, r, o)
		}
	}
	for root := 0; root < n; root++ {
		b, err := goccl.BroadcastObject(ctx, c, mine, root)
		must(t, c, fmt.Sprintf("broadcast_object/root=%d", root), err)
		if b.Name != fmt.Sprint("rank", root) || len(b.Vals) != root {
			t.Fatalf("rank %d: broadcast_object/root=%d: %+v", me, root, b)
		}
		g, err := goccl.GatherObject(ctx, c, mine.Name, root)
		must(t, c, fmt.Sprintf("gather_object/root=%d", root), err)
		if (me == root) != (g != nil) {
			t.Fatalf("rank %d: gather_object/root=%d: %v", me, root, g)
		}
		for r, s := range g {
			if s != fmt.Sprint("rank", r) {
				t.Fatalf("rank %d: gather_object/root=%d: %v", me, root, g)
			}
		}
		var objs []string
		if me == root {
			for r := 0; r < n; r++ {
				objs = append(objs, strings.Repeat("x", r+root))
			}
		}
		s, err := goccl.ScatterObject(ctx, c, objs, root)
		must(t, c, fmt.Sprintf("scatter_object/root=%d", root), err)
		if s != strings.Repeat("x", me+root) {
			t.Fatalf("rank %d: scatter_object/root=%d: %q", me, root, s)
		}
	}
}

// groups: the even ranks by NewGroup, then a Split by parity with
// descending keys, each running an allreduce.
func groups(t *testing.T, ctx context.Context, c *goccl.Comm) {
	n, me := c.Size(), c.Rank()
	var evens []int
	for r := n - 1; r >= 0; r-- {
		if r%2 == 0 {
			evens = append(evens, r) // deliberately unsorted
		}
	}
	g, err := c.NewGroup(evens)
	must(t, c, "new_group", err)
	if (me%2 == 0) != (g != nil) {
		t.Fatalf("rank %d: new_group membership wrong", me)
	}
	if g != nil {
		if g.Size() != len(evens) || g.Rank() != me/2 {
			t.Fatalf("rank %d: new_group: rank %d size %d", me, g.Rank(), g.Size())
		}
		v := []int64{int64(me), 1}
		must(t, c, "new_group allreduce", g.AllReduce(ctx, v, reduceop.Sum))
		want := int64(0)
		for _, r := range evens {
			want += int64(r)
		}
		if v[0] != want || v[1] != int64(len(evens)) {
			t.Fatalf("rank %d: new_group allreduce = %v, want [%d %d]", me, v, want, len(evens))
		}
	}
	sub, err := c.Split(ctx, me%2, -me)
	must(t, c, "split", err)
	var members []int // descending world ranks of my parity
	for r := n - 1; r >= 0; r-- {
		if r%2 == me%2 {
			members = append(members, r)
		}
	}
	if sub.Size() != len(members) || sub.Rank() != slices.Index(members, me) {
		t.Fatalf("rank %d: split: rank %d size %d, want %d of %v", me, sub.Rank(), sub.Size(), slices.Index(members, me), members)
	}
	for i, w := range members {
		if gr, err := sub.GlobalRank(i); err != nil || gr != w {
			t.Fatalf("rank %d: split: group rank %d is world %d (%v), want %d", me, i, gr, err, w)
		}
	}
	v := []int32{int32(me)}
	must(t, c, "split allreduce", sub.AllReduce(ctx, v, reduceop.Sum))
	want := int32(0)
	for _, r := range members {
		want += int32(r)
	}
	if v[0] != want {
		t.Fatalf("rank %d: split allreduce = %d, want %d", me, v[0], want)
	}
	none, err := c.Split(ctx, goccl.NoColor, 0)
	if none != nil || err != nil {
		t.Fatalf("rank %d: split NoColor: %v %v", me, none, err)
	}
	// The world still works after the groups' traffic.
	w := []int32{1}
	must(t, c, "world allreduce after groups", c.AllReduce(ctx, w, reduceop.Sum))
	if w[0] != int32(n) {
		t.Fatalf("rank %d: world allreduce after groups = %d", me, w[0])
	}
}

// asyncOverlap starts several collectives of different kinds before
// waiting for any of them.
func asyncOverlap(t *testing.T, ctx context.Context, c *goccl.Comm) {
	n, me := c.Size(), c.Rank()
	var works []*goccl.Work
	maxes := make([][]float64, 4)
	for i := range maxes {
		maxes[i] = []float64{float64(i), float64(me)}
		works = append(works, c.AllReduceAsync(ctx, maxes[i], reduceop.Max))
	}
	bc := make([]int32, 1031)
	if me == n-1 {
		for i := range bc {
			bc[i] = int32(i)
		}
	}
	works = append(works, c.BroadcastAsync(ctx, bc, n-1))
	ag := make([]int64, 3*n)
	works = append(works, c.AllGatherAsync(ctx, []int64{int64(me), 1, 2}, ag))
	big := make([]float32, 50_000)
	for i := range big {
		big[i] = float32(val(reduceop.Sum, me, i))
	}
	works = append(works, c.AllReduceAsync(ctx, big, reduceop.Sum))
	for i := len(works) - 1; i >= 0; i-- { // wait in reverse order
		must(t, c, fmt.Sprintf("async work %d", i), works[i].Wait(ctx))
	}
	for i, b := range maxes {
		if b[0] != float64(i) || b[1] != float64(n-1) {
			t.Fatalf("rank %d: async allreduce %d: %v", me, i, b)
		}
	}
	for i, v := range bc {
		if v != int32(i) {
			t.Fatalf("rank %d: async broadcast: element %d = %d", me, i, v)
		}
	}
	for r := 0; r < n; r++ {
		if ag[3*r] != int64(r) || ag[3*r+1] != 1 || ag[3*r+2] != 2 {
			t.Fatalf("rank %d: async allgather: %v", me, ag)
		}
	}
	want := reference(reduceop.Float32, reduceop.Sum, n, span(0, len(big)))
	for i, v := range big {
		if float64(v) != want[i] {
			t.Fatalf("rank %d: async large allreduce: element %d = %v, want %v", me, i, v, want[i])
		}
	}
}

// ---- BenchmarkAllReduceTCP ----

// BenchmarkAllReduceTCP times float32 Sum allreduces between two processes
// over loopback TCP. The timer covers only rank 0's b.N allreduces: the
// parent starts it when rank 0 (connected and warmed up) says it is ready
// and stops it when rank 0 says it is done.
func BenchmarkAllReduceTCP(b *testing.B) {
	const ranks = 2
	sizes := []struct {
		name  string
		bytes int
	}{{"8B", 8}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"64MiB", 64 << 20}}
	for _, a := range []algo.Algorithm{algo.Ring, algo.Halving, algo.Doubling, algo.Tree} {
		for _, sz := range sizes {
			b.Run(string(a)+"/"+sz.name, func(b *testing.B) {
				b.SetBytes(int64(sz.bytes))
				runBenchJob(b, ranks, a, sz.bytes, true)
				// Bus bandwidth as nccl-tests defines it for allreduce.
				if s := b.Elapsed().Seconds(); s > 0 {
					busbw := float64(sz.bytes) * float64(b.N) / s * 2 * (ranks - 1) / ranks
					b.ReportMetric(busbw/1e9, "busbw_GB/s")
				}
			})
		}
	}
}

// BenchmarkMismatchCheckTCP measures the collective fingerprint's cost
// where it matters, an 8-byte allreduce between two processes over TCP,
// with and without it. Compare the two with benchstat over several runs
// (-count 10): the machine's noise is larger than the difference.
func BenchmarkMismatchCheckTCP(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("check=%v", on), func(b *testing.B) {
			runBenchJob(b, 2, algo.Doubling, 8, on)
		})
	}
}

// runBenchJob runs b.N allreduces in child processes, with the timer
// running only while rank 0 runs them.
func runBenchJob(b *testing.B, ranks int, a algo.Algorithm, size int, check bool) {
	b.StopTimer()
	var stdin io.WriteCloser
	pr, pw := io.Pipe()
	lines := make(chan string, 16)
	j := startJob(b, ranks, "bench", []string{
		envBenchN + "=" + strconv.Itoa(b.N),
		envBenchAlg + "=" + string(a),
		envBenchLen + "=" + strconv.Itoa(size),
		envBenchChk + "=" + strconv.FormatBool(check),
	}, func(cmd *exec.Cmd) error {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return err
		}
		cmd.Stdout = io.MultiWriter(cmd.Stdout, pw)
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				if l := sc.Text(); l == benchReady || l == benchDone {
					lines <- l
				}
			}
			io.Copy(io.Discard, pr)
			close(lines)
		}()
		return nil
	})
	defer j.kill()

	// A rank that fails or hangs ends the wait for rank 0's lines.
	exited := make(chan error, 1)
	go func() {
		err := j.finish(2 * time.Minute)
		pw.Close()
		exited <- err
	}()
	expect := func(want string) {
		select {
		case l, ok := <-lines:
			if ok && l == want {
				return
			}
			j.kill()
			b.Fatalf("rank 0 did not say %s (%v); rank 0's output:\n%s", want, <-exited, j.outs[0])
		case err := <-exited:
			b.Fatalf("rank 0 did not say %s: %v", want, err)
		}
	}
	expect(benchReady)
	b.ResetTimer()
	b.StartTimer()
	if _, err := fmt.Fprintln(stdin, benchGo); err != nil {
		b.Fatal(err)
	}
	expect(benchDone)
	b.StopTimer()
	if err := <-exited; err != nil {
		b.Fatal(err)
	}
}

// benchRank is one rank of BenchmarkAllReduceTCP.
func benchRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	iters, err1 := strconv.Atoi(os.Getenv(envBenchN))
	size, err2 := strconv.Atoi(os.Getenv(envBenchLen))
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	c := rankComm(t, ctx, goccl.WithMismatchCheck(os.Getenv(envBenchChk) != "false"))
	defer c.Close()
	a := algo.Algorithm(os.Getenv(envBenchAlg))
	must(t, c, "set_algorithm", c.SetAlgorithm(a))
	buf := make([]float32, size/4)
	for i := range buf {
		buf[i] = float32(c.Rank() + 1)
	}
	// Warm up (connections, pools) and check the answer once.
	must(t, c, "warm-up allreduce", c.AllReduce(ctx, buf, reduceop.Sum))
	want := float32(c.Size() * (c.Size() + 1) / 2)
	for i, v := range buf {
		if v != want {
			t.Fatalf("rank %d: warm-up allreduce/%s: element %d = %v, want %v", c.Rank(), a, i, v, want)
		}
	}
	if c.Rank() == 0 {
		fmt.Println(benchReady)
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != benchGo {
			t.Fatalf("rank 0: handshake: %q %v", line, err)
		}
	}
	// The other ranks wait in the first allreduce until rank 0 joins.
	for range iters {
		must(t, c, "allreduce", c.AllReduce(ctx, buf, reduceop.Sum))
	}
	if c.Rank() == 0 {
		fmt.Println(benchDone)
	}
	must(t, c, "final barrier", c.Barrier(ctx))
}
