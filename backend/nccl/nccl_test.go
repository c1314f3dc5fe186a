//go:build cuda && cgo

package nccl_test

// These tests run goccl's collectives on device memory over the NCCL
// backend, as processes on one host, against a host reference. Without a
// GPU they run over the fake NCCL (fakenccl/) and the fake CUDA
// (device/cuda/compat/fakecuda), which scripts/nccl-check.sh builds and
// names in GOCCL_NCCL_LIB and LD_LIBRARY_PATH; without GOCCL_NCCL_LIB
// they skip. Each test starts its ranks as processes of this test binary
// (GOCCL_NCCL_CHECK names what a rank runs); a rank prints "NCCL-CHECK ok"
// when its part passed.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/backend/nccl"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

const envCheck = "GOCCL_NCCL_CHECK"

func TestMain(m *testing.M) {
	if check := os.Getenv(envCheck); check != "" {
		os.Exit(rankMain(check))
	}
	os.Exit(m.Run())
}

// job runs n ranks of check; extra[r] is added to rank r's environment.
// It returns each rank's output; it fails t if a rank does not exit 0
// within timeout.
func job(t *testing.T, n int, check string, timeout time.Duration, extra func(r int) []string) []string {
	t.Helper()
	if os.Getenv(nccl.EnvLib) == "" {
		t.Skip("GOCCL_NCCL_LIB is not set: run scripts/nccl-check.sh (the fake NCCL and CUDA)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	outs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envCheck+"="+check,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "GOCCL_TRANSPORT=tcp")
		if extra != nil {
			cmd.Env = append(cmd.Env, extra(r)...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			out, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(out), err
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil || !strings.Contains(outs[r], "NCCL-CHECK ok") {
			t.Errorf("rank %d of %s: %v\n%s", r, check, errs[r], outs[r])
		} else {
			t.Logf("rank %d:\n%s", r, outs[r])
		}
	}
	return outs
}

func TestSuite2(t *testing.T) { job(t, 2, "suite", time.Minute, nil) }
func TestSuite3(t *testing.T) { job(t, 3, "suite", time.Minute, nil) }

// TestSuiteNoAvg: an NCCL without ncclAvg (before 2.10): Avg runs as Sum
// and a scale on the stream.
func TestSuiteNoAvg(t *testing.T) {
	job(t, 2, "suite", time.Minute, func(int) []string { return []string{"GOCCL_FAKENCCL_VERSION=20903"} })
}

// TestGroups: under auto, every rank having NCCL, the world's calls and
// its groups' run on NCCL, and GOCCL_DEBUG=info says so once a rank.
func TestGroups(t *testing.T) {
	outs := job(t, 3, "groups", time.Minute, func(int) []string { return []string{"GOCCL_DEBUG=info"} })
	saysBackend(t, outs, "auto: nccl (NCCL 2.22.3")
}

// TestOneBit: onebit.CompressedAllReduceOn on device memory runs its
// exchanges on NCCL, with the host's result.
func TestOneBit(t *testing.T) { job(t, 3, "onebit", time.Minute, nil) }

func TestDeadline(t *testing.T) { job(t, 3, "deadline", time.Minute, nil) }

func TestMismatch(t *testing.T) { job(t, 2, "mismatch", time.Minute, nil) }

// TestLostRank: the last rank exits after its first call; the others'
// next call fails naming it.
func TestLostRank(t *testing.T) { job(t, 3, "lost", time.Minute, nil) }

// TestAutoFallback: one rank cannot load the library, so every rank runs
// goccl's own path, with the same results, and GOCCL_DEBUG=info says why
// once a rank.
func TestAutoFallback(t *testing.T) {
	outs := job(t, 2, "fallback", time.Minute, func(r int) []string {
		if r == 1 {
			return []string{"GOCCL_DEBUG=info", nccl.EnvLib + "=/nonexistent/libnccl.so.2"}
		}
		return []string{"GOCCL_DEBUG=info"}
	})
	saysBackend(t, outs, "did not load on rank(s) [1]")
}

// TestRefused: GOCCL_BACKEND=nccl without the library is ErrInvalid
// wrapping backend.ErrUnavailable, naming the library.
func TestRefused(t *testing.T) {
	job(t, 1, "refused", time.Minute, func(int) []string { return []string{nccl.EnvLib + "=/nonexistent/libnccl.so.2"} })
}

// --- the ranks ---

func rankMain(check string) int {
	ctx := context.Background()
	if check == "refused" {
		_, err := goccl.NewLocal(2, goccl.WithBackend("nccl"))
		fmt.Println("refused:", err)
		if errors.Is(err, goccl.ErrInvalid) && errors.Is(err, backend.ErrUnavailable) && strings.Contains(fmt.Sprint(err), "/nonexistent/libnccl.so.2") {
			fmt.Println("NCCL-CHECK ok")
		}
		return 0
	}
	if f, ok := processChecks[check]; ok { // a check of its own process, that makes its own communicators
		if f() {
			fmt.Println("NCCL-CHECK ok")
		}
		return 0
	}
	be := "nccl"
	if check == "fallback" || check == "groups" { // auto: the ranks agree, then NCCL runs, or goccl's path
		be = "auto"
	}
	c, err := goccl.Init(ctx, goccl.WithBackend(be), goccl.WithTimeout(30*time.Second))
	if err != nil {
		fmt.Println("init:", err)
		return 2
	}
	dev, err := cuda.Open(0) // the fake CUDA has one device, shared by the ranks
	if err != nil {
		fmt.Println("cuda:", err)
		return 2
	}
	r := &rank{c: c, dev: dev, ctx: ctx}
	ok := false
	switch check {
	case "suite":
		ok = r.suite(true)
	case "fallback":
		ok = r.suite(false)
	case "groups":
		ok = r.groups()
	case "deadline":
		ok = r.deadline()
	case "mismatch":
		ok = r.mismatch()
	case "lost":
		ok = r.lost()
	case "onebit":
		ok = r.oneBit()
	case "trace":
		ok = r.trace()
	case "p2p":
		ok = r.p2p()
	}
	if ok {
		fmt.Println("NCCL-CHECK ok")
	}
	c.Close()
	return 0
}

type rank struct {
	c   *goccl.Comm
	dev *cuda.Context
	ctx context.Context
	bad int
}

func (r *rank) failf(format string, args ...any) {
	r.bad++
	fmt.Printf("rank %d: "+format+"\n", append([]any{r.c.Rank()}, args...)...)
}

// val is element i of rank q's data: small integers, exact in every
// dtype, whose products over 3 ranks fit in a uint8.
func val(q, i int) float64 { return float64(q%3+1) + float64(i%3) }

func encode(dt reduceop.DType, v []float64) []byte {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		switch dt {
		case reduceop.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
		case reduceop.Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
		case reduceop.BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(x))>>16))
		case reduceop.Int32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(x)))
		case reduceop.Int64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(x)))
		case reduceop.Uint8:
			b[i] = uint8(x)
		case reduceop.Int8:
			b[i] = uint8(int8(x))
		case reduceop.Float16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(reduceop.F16FromFloat32(float32(x))))
		case reduceop.Uint32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		case reduceop.Uint64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
		}
	}
	return b
}

func decode(dt reduceop.DType, b []byte) []float64 {
	v := make([]float64, len(b)/dt.Size())
	for i := range v {
		switch dt {
		case reduceop.Float32:
			v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		case reduceop.Float64:
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		case reduceop.BFloat16:
			v[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
		case reduceop.Int32:
			v[i] = float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		case reduceop.Int64:
			v[i] = float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
		case reduceop.Uint8:
			v[i] = float64(b[i])
		case reduceop.Int8:
			v[i] = float64(int8(b[i]))
		case reduceop.Float16:
			v[i] = float64(reduceop.F16(binary.LittleEndian.Uint16(b[2*i:])).Float32())
		case reduceop.Uint32:
			v[i] = float64(binary.LittleEndian.Uint32(b[4*i:]))
		case reduceop.Uint64:
			v[i] = float64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
	return v
}

// buf is a device buffer holding v.
func (r *rank) buf(dt reduceop.DType, v []float64) *cuda.Buffer {
	b, err := r.dev.NewBuffer(dt, len(v))
	if err != nil {
		panic(err)
	}
	if len(v) > 0 {
		if err := b.CopyFromHost(r.ctx, 0, encode(dt, v)); err != nil {
			panic(err)
		}
	}
	return b
}

func (r *rank) read(b *cuda.Buffer) []float64 {
	h := make([]byte, b.Len()*b.DType().Size())
	if err := b.CopyToHost(r.ctx, h, 0); err != nil {
		panic(err)
	}
	return decode(b.DType(), h)
}

func (r *rank) check(what string, dt reduceop.DType, got, want []float64) {
	tol := 0.0
	if dt.IsFloat() {
		tol = 1e-5
		if dt == reduceop.BFloat16 || dt == reduceop.Float16 {
			tol = 1.0 / 64
		}
	}
	if len(got) != len(want) {
		r.failf("%s %v: %d elements, want %d", what, dt, len(got), len(want))
		return
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > tol*math.Max(1, math.Abs(want[i])) {
			r.failf("%s %v: [%d] = %v, want %v", what, dt, i, got[i], want[i])
			return
		}
	}
}

func seq(n int, f func(i int) float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = f(i)
	}
	return v
}

// reference is op over every rank's val(q, i).
func reference(dt reduceop.DType, op reduceop.Op, size, i int) float64 {
	acc := val(0, i)
	for q := 1; q < size; q++ {
		x := val(q, i)
		switch op {
		case reduceop.Sum, reduceop.Avg:
			acc += x
		case reduceop.Prod:
			acc *= x
		case reduceop.Min:
			acc = math.Min(acc, x)
		case reduceop.Max:
			acc = math.Max(acc, x)
		}
	}
	if op == reduceop.Avg {
		acc /= float64(size)
		if !dt.IsFloat() {
			acc = math.Trunc(acc)
		}
	}
	return acc
}

// suite runs every collective the backend takes on device memory and
// checks it against the host reference; onNCCL: each call must have run
// on NCCL (else on goccl's own path: none may have).
func (r *rank) suite(onNCCL bool) bool {
	c, me, n := r.c, r.c.Rank(), r.c.Size()
	before := nccl.Issued()
	calls := uint64(0)
	const m = 1000 // elements per rank's block
	do := func(what string, err error) {
		calls++
		if err != nil {
			r.failf("%s: %v", what, err)
		}
	}
	for _, dt := range []reduceop.DType{reduceop.Float32, reduceop.Float64, reduceop.Float16, reduceop.BFloat16,
		reduceop.Int8, reduceop.Uint8, reduceop.Int32, reduceop.Uint32, reduceop.Int64, reduceop.Uint64} {
		for _, op := range []reduceop.Op{reduceop.Sum, reduceop.Prod, reduceop.Min, reduceop.Max, reduceop.Avg} {
			if device.CheckReduce(op, dt) != nil {
				continue // goccl's argument check refuses it before a backend is asked: Avg on integers, uint32 and uint64 on device memory
			}
			b := r.buf(dt, seq(m, func(i int) float64 { return val(me, i) }))
			do("allreduce", c.AllReduce(r.ctx, b, op))
			r.check(fmt.Sprintf("allreduce %v", op), dt, r.read(b), seq(m, func(i int) float64 { return reference(dt, op, n, i) }))
			b.Free()
		}
		root := 1 % n
		b := r.buf(dt, seq(m, func(i int) float64 { return val(me, i) }))
		do("broadcast", c.Broadcast(r.ctx, b, root))
		r.check("broadcast", dt, r.read(b), seq(m, func(i int) float64 { return val(root, i) }))
		b.Free()

		reduces := device.CheckReduce(reduceop.Sum, dt) == nil
		root = n - 1
		if reduces {
			b = r.buf(dt, seq(m, func(i int) float64 { return val(me, i) }))
			do("reduce", c.Reduce(r.ctx, b, reduceop.Sum, root))
			if me == root {
				r.check("reduce", dt, r.read(b), seq(m, func(i int) float64 { return reference(dt, reduceop.Sum, n, i) }))
			}
			b.Free()
		}

		s := r.buf(dt, seq(m, func(i int) float64 { return val(me, i) }))
		rv := r.buf(dt, make([]float64, n*m))
		do("allgather", c.AllGather(r.ctx, s, rv))
		r.check("allgather", dt, r.read(rv), seq(n*m, func(i int) float64 { return val(i/m, i%m) }))
		s.Free()
		rv.Free()

		// reduce-scatter: rank q's block j is val(q, j*m+i).
		if reduces {
			s = r.buf(dt, seq(n*m, func(i int) float64 { return val(me, i) }))
			rv = r.buf(dt, make([]float64, m))
			do("reducescatter", c.ReduceScatter(r.ctx, s, rv, reduceop.Sum))
			r.check("reducescatter", dt, r.read(rv), seq(m, func(i int) float64 { return reference(dt, reduceop.Sum, n, me*m+i) }))
			s.Free()
			rv.Free()
		}

		// all-to-all: rank q sends block j, 10*q+j+i%3, to rank j.
		s = r.buf(dt, seq(n*m, func(i int) float64 { return float64(10*me+i/m) + float64(i%3) }))
		rv = r.buf(dt, make([]float64, n*m))
		do("alltoall", c.AllToAll(r.ctx, s, rv))
		r.check("alltoall", dt, r.read(rv), seq(n*m, func(i int) float64 { return float64(10*(i/m)+me) + float64((me*m+i%m)%3) }))
		s.Free()
		rv.Free()

		root = 0
		s = r.buf(dt, seq(m, func(i int) float64 { return val(me, i) }))
		rv = r.buf(dt, make([]float64, n*m))
		do("gather", c.Gather(r.ctx, s, rv, root))
		if me == root {
			r.check("gather", dt, r.read(rv), seq(n*m, func(i int) float64 { return val(i/m, i%m) }))
		}
		s.Free()
		rv.Free()

		root = n - 1
		s = r.buf(dt, seq(n*m, func(i int) float64 { return float64(i/m) + float64(i%5) }))
		rv = r.buf(dt, make([]float64, m))
		do("scatter", c.Scatter(r.ctx, s, rv, root))
		r.check("scatter", dt, r.read(rv), seq(m, func(i int) float64 { return float64(me) + float64(i%5) }))
		s.Free()
		rv.Free()
	}
	if onNCCL {
		calls += r.onStream()
	}
	got := nccl.Issued() - before
	if onNCCL && got != calls {
		r.failf("%d calls ran on NCCL, want all %d", got, calls)
	}
	if !onNCCL && got != 0 {
		r.failf("%d calls ran on NCCL, want none (auto falls back)", got)
	}
	// A dtype NCCL has no name for, and an op it lacks: goccl's own path.
	b := r.buf(reduceop.Int32, seq(m, func(i int) float64 { return val(me, i) }))
	before = nccl.Issued()
	if err := c.AllReduce(r.ctx, b, reduceop.BOr); err != nil {
		r.failf("allreduce BOr: %v", err)
	}
	if nccl.Issued() != before {
		r.failf("BOr ran on NCCL")
	}
	b.Free()
	fmt.Printf("rank %d: %d calls checked, %d on NCCL\n", me, calls, got)
	return r.bad == 0
}

// onStream: an allreduce on a framework's stream is enqueued there by
// NCCL before OnStream's call returns, with nothing waited on by the
// host; it runs after the work enqueued before it (a copy from pinned
// memory, held back), and work enqueued after it (a copy back) sees its
// result.
func (r *rank) onStream() uint64 {
	c, me, n := r.c, r.c.Rank(), r.c.Size()
	const m = 4096
	s, err := r.dev.NewStream()
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	h, err := r.dev.AllocHost(m * 4)
	if err != nil {
		panic(err)
	}
	defer h.Free()
	b := r.buf(reduceop.Float32, make([]float64, m))
	defer b.Free()
	copy(h.Bytes(), encode(reduceop.Float32, seq(m, func(i int) float64 { return val(me, i) })))
	hold, err := s.Hold() // the copy waits: a call that did not wait for it would reduce zeros
	if err != nil {
		panic(err)
	}
	if err := s.CopyFromHost(b, 0, h.Bytes()); err != nil {
		panic(err)
	}
	before := nccl.Issued()
	w := c.OnStream(s).AllReduce(r.ctx, b, reduceop.Sum)
	// It returned with the call enqueued on s (issued to NCCL), not done:
	// s is held, so nothing on it has run.
	if nccl.Issued() != before+1 {
		r.failf("OnStream's allreduce returned before it was issued on the stream")
	}
	time.Sleep(50 * time.Millisecond)
	if w.IsCompleted() {
		r.failf("OnStream's allreduce completed while its stream was held")
	}
	hold.Release()
	out := make([]byte, m*4)
	back, err := r.dev.AllocHost(m * 4)
	if err != nil {
		panic(err)
	}
	defer back.Free()
	if err := s.CopyToHost(back.Bytes(), b, 0); err != nil {
		panic(err)
	}
	if err := w.Wait(r.ctx); err != nil {
		r.failf("allreduce on a stream: %v", err)
	}
	if err := s.Synchronize(r.ctx); err != nil {
		panic(err)
	}
	copy(out, back.Bytes())
	r.check("allreduce on a stream", reduceop.Float32, decode(reduceop.Float32, out), seq(m, func(i int) float64 { return reference(reduceop.Float32, reduceop.Sum, n, i) }))
	return 1
}

// oneBit: three steps of the compressed allreduce on the host (goccl's own
// path) and on the device (its all-to-all and allgather on NCCL), from
// the same inputs; the outputs agree.
func (r *rank) oneBit() bool {
	c, me, n := r.c, r.c.Rank(), r.c.Size()
	const m = 1000
	st, err := onebit.NewState(m, n)
	if err != nil {
		panic(err)
	}
	dst, err := onebit.NewDeviceState(r.dev, r.dev.Kernel(), m, n)
	if err != nil {
		panic(err)
	}
	defer dst.Free()
	s, err := r.dev.NewStream()
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	pin, err := r.dev.AllocHost(4 * dst.PaddedLen())
	if err != nil {
		panic(err)
	}
	defer pin.Free()
	b := r.buf(reduceop.Float32, make([]float64, m))
	defer b.Free()
	before := nccl.Issued()
	for step := range 3 {
		x := make([]float32, m)
		for i := range x {
			x[i] = float32(math.Sin(float64(1 + i + 7*me + 13*step))) // a rank's own, every step new
		}
		h := pin.Bytes()[:4*m]
		for i, v := range x {
			binary.LittleEndian.PutUint32(h[4*i:], math.Float32bits(v))
		}
		if err := onebit.CompressedAllReduce(r.ctx, c, x, st); err != nil {
			r.failf("host: %v", err)
			return false
		}
		if err := s.CopyFromHost(b, 0, h); err != nil {
			panic(err)
		}
		if err := onebit.CompressedAllReduceOn(r.ctx, c, s, b, dst); err != nil {
			r.failf("device: %v", err)
			return false
		}
		if err := s.Synchronize(r.ctx); err != nil {
			panic(err)
		}
		got := r.read(b)
		for i := range x {
			if math.Abs(got[i]-float64(x[i])) > 1e-5*math.Max(1, math.Abs(float64(x[i]))) {
				r.failf("step %d: [%d] = %v on the device, %v on the host", step, i, got[i], x[i])
				return false
			}
		}
	}
	if nccl.Issued() == before {
		r.failf("no exchange ran on NCCL")
	}
	fmt.Printf("rank %d: %d NCCL calls in 3 steps\n", me, nccl.Issued()-before)
	return r.bad == 0
}

// groups: a group split from a world whose communicator is up
// (ncclCommSplit), and one made before any device call of its own (its
// own id): an allreduce on each.
func (r *rank) groups() bool {
	c, me := r.c, r.c.Rank()
	before := nccl.Issued()
	early, err := c.NewGroup([]int{1, 2})
	if err != nil {
		r.failf("NewGroup: %v", err)
		return false
	}
	b := r.buf(reduceop.Float32, []float64{float64(me)})
	if err := c.AllReduce(r.ctx, b, reduceop.Sum); err != nil { // the world's communicator comes up
		r.failf("world allreduce: %v", err)
	}
	r.check("world", reduceop.Float32, r.read(b), []float64{3})
	split, err := c.Split(r.ctx, me%2, me)
	if err != nil {
		r.failf("Split: %v", err)
		return false
	}
	b = r.buf(reduceop.Float32, []float64{float64(me + 1)})
	if err := split.AllReduce(r.ctx, b, reduceop.Sum); err != nil {
		r.failf("split allreduce: %v", err)
	}
	want := map[int]float64{0: 1 + 3, 1: 2, 2: 1 + 3}[me]
	r.check("split", reduceop.Float32, r.read(b), []float64{want})
	if early != nil {
		b = r.buf(reduceop.Int64, []float64{float64(me * 10)})
		if err := early.AllReduce(r.ctx, b, reduceop.Max); err != nil {
			r.failf("group allreduce: %v", err)
		}
		r.check("group", reduceop.Int64, r.read(b), []float64{20})
	} else if me != 0 {
		r.failf("not in the group [1 2]")
	}
	// Under auto the world runs on NCCL (the ranks agreed at Init), and
	// its groups inherit it: every call above ran there.
	calls := uint64(2)
	if early != nil {
		calls = 3
	}
	if got := nccl.Issued() - before; got != calls {
		r.failf("%d calls ran on NCCL, want %d: a group's calls run on its world's backend", got, calls)
	}
	return r.bad == 0
}

// deadline: the last rank sleeps past the others' deadline; their calls
// fail with ErrTimeout naming it, and the communicator is aborted.
func (r *rank) deadline() bool {
	c, me, n := r.c, r.c.Rank(), r.c.Size()
	b := r.buf(reduceop.Float32, seq(64, func(int) float64 { return 1 }))
	if err := c.AllReduce(r.ctx, b, reduceop.Sum); err != nil { // the communicator comes up
		r.failf("first allreduce: %v", err)
		return false
	}
	if me == n-1 {
		time.Sleep(3 * time.Second)
		ctx, cancel := context.WithTimeout(r.ctx, time.Second)
		defer cancel()
		err := c.AllReduce(ctx, b, reduceop.Sum)
		fmt.Printf("rank %d (slept): %v\n", me, err)
		return true
	}
	// Rank 0's deadline comes first: the others may see its abort first.
	ctx, cancel := context.WithTimeout(r.ctx, time.Duration(1+me)*time.Second)
	defer cancel()
	err := c.AllReduce(ctx, b, reduceop.Sum)
	fmt.Printf("rank %d: %v\n", me, err)
	var ge *goccl.Error
	if me == 0 && (!errors.Is(err, goccl.ErrTimeout) || !errors.Is(err, goccl.ErrAborted) || !errors.As(err, &ge) || ge.Peer != n-1) {
		r.failf("want ErrTimeout and ErrAborted naming rank %d: %v", n-1, err)
	}
	if err == nil {
		r.failf("the call succeeded without rank %d", n-1)
	}
	if err := c.AllReduce(r.ctx, b, reduceop.Sum); err == nil {
		r.failf("a call after the abort succeeded")
	}
	return r.bad == 0
}

// lost: the last rank exits (its process ends, without Close) after the
// communicator is up; the others' next call fails, naming it.
func (r *rank) lost() bool {
	c, me, n := r.c, r.c.Rank(), r.c.Size()
	b := r.buf(reduceop.Float32, seq(64, func(int) float64 { return 1 }))
	if err := c.AllReduce(r.ctx, b, reduceop.Sum); err != nil {
		r.failf("first allreduce: %v", err)
		return false
	}
	if err := c.Barrier(r.ctx); err != nil { // every rank is past the first call
		r.failf("barrier: %v", err)
		return false
	}
	if me == n-1 {
		time.Sleep(300 * time.Millisecond) // the others have left the barrier
		fmt.Println("NCCL-CHECK ok (exiting)")
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	err := c.AllReduce(ctx, b, reduceop.Sum)
	fmt.Printf("rank %d: %v\n", me, err)
	var ge *goccl.Error
	if !errors.Is(err, goccl.ErrPeerClosed) || !errors.As(err, &ge) || ge.Peer != n-1 {
		r.failf("want ErrPeerClosed naming rank %d: %v", n-1, err)
	}
	return r.bad == 0
}

// mismatch: rank 1 broadcasts where rank 0 allreduces; the guard finds it
// a few calls later at most and the calls fail with ErrMismatch naming
// both.
func (r *rank) mismatch() bool {
	c, me := r.c, r.c.Rank()
	b := r.buf(reduceop.Float32, seq(8, func(int) float64 { return 1 }))
	// The communicator comes up first: ncclCommInitRank waits for every
	// member, with no deadline, so a call that differed there could hold
	// a rank in it.
	err := c.AllReduce(r.ctx, b, reduceop.Sum)
	if err != nil {
		r.failf("first allreduce: %v", err)
		return false
	}
	if me == 1 {
		err = c.Broadcast(r.ctx, b, 0)
	} else {
		err = c.AllReduce(r.ctx, b, reduceop.Sum)
	}
	deadline := time.Now().Add(10 * time.Second)
	for err == nil && time.Now().Before(deadline) {
		err = c.AllReduce(r.ctx, b, reduceop.Sum)
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("rank %d: %v\n", me, err)
	msg := fmt.Sprint(err)
	if !errors.Is(err, goccl.ErrMismatch) || !strings.Contains(msg, "broadcast") || !strings.Contains(msg, "all_reduce") {
		r.failf("want ErrMismatch naming broadcast and all_reduce: %v", err)
	}
	return r.bad == 0
}
