//go:build mpi

package mpi_test

// These tests run goccl's collectives over the MPI backend against a host
// reference. They need a job: run the test binary under mpirun
// (scripts/mpi-check.sh does), e.g.
//
//	go test -tags mpi -c -o /tmp/mpi.test ./backend/mpi
//	mpirun --allow-run-as-root --oversubscribe -np 4 /tmp/mpi.test -test.v
//
// or with MPICH:
//
//	go test -tags mpi,mpich -c -o /tmp/mpich.test ./backend/mpi
//	mpiexec.mpich -launcher fork -np 4 /tmp/mpich.test -test.v
//
// Alone (no mpirun) they skip. One world serves every test of a process
// (MPI initializes once): TestMain makes it. GOCCL_MPI_CHECK=deadline or
// mismatch runs the check of that name instead, which ends the job with
// MPI_Abort as a failed MPI job must end; its rank 0 prints a line that
// starts "MPI-CHECK ok" when the error named the right rank.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend/mpi"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/reduceop"
	"golang.org/x/sys/unix"
)

var world *goccl.Comm

func TestMain(m *testing.M) {
	if os.Getenv("OMPI_COMM_WORLD_RANK") == "" && os.Getenv("PMI_RANK") == "" {
		os.Exit(m.Run()) // not under mpirun: every test skips
	}
	if err := checkLog(); err != nil {
		fmt.Fprintln(os.Stderr, "check log:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	c, err := goccl.Init(ctx, goccl.WithBackend("mpi"), goccl.WithTimeout(time.Minute),
		goccl.WithCommsLog(commslog.Config{Enabled: true, ProfAll: true}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(2)
	}
	world = c
	switch os.Getenv("GOCCL_MPI_CHECK") {
	case "deadline":
		checkDeadline(c)
	case "mismatch":
		checkMismatch(c)
	}
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		code = 1
	}
	os.Exit(code)
}

// checkLog sends this rank's output (stdout and stderr) to a file of its
// own, rank<N>.log in GOCCL_MPI_CHECK_DIR, under a check that ends the
// job with MPI_Abort: the launcher may end before it has forwarded what
// the ranks wrote (MPICH's Hydra exits as soon as it hears of the abort,
// and the watchdog's message was lost in about one run in ten), and the
// check's evidence with it. The file is written as the process writes.
func checkLog() error {
	dir := os.Getenv("GOCCL_MPI_CHECK_DIR")
	if dir == "" || os.Getenv("GOCCL_MPI_CHECK") == "" {
		return nil
	}
	rank := cmp.Or(os.Getenv("OMPI_COMM_WORLD_RANK"), os.Getenv("PMI_RANK"))
	f, err := os.Create(filepath.Join(dir, "rank"+rank+".log"))
	if err != nil {
		return err
	}
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
			return fmt.Errorf("dup3 onto %d: %w", fd, err)
		}
	}
	return f.Close() // fds 1 and 2 keep the file open
}

func need(t *testing.T) *goccl.Comm {
	t.Helper()
	if world == nil {
		t.Skip("not under mpirun")
	}
	return world
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// val is element i of rank r's data: small values, so that sums and
// products are exact in every dtype.
func val[T any](r, i int) T {
	var z T
	x := (r*7 + i*3) % 5
	switch p := any(&z).(type) {
	case *float32:
		*p = float32(x) - 1
	case *float64:
		*p = float64(x) + 0.5
	case *int32:
		*p = int32(x%3) + 1 - int32(r%2)
	case *int64:
		*p = int64(x) - 2
	case *uint8:
		*p = uint8(x*37 + r)
	case *uint16: // x<<13 sets the top bit at x = 4: an MPI that orders
		// unsigned values as signed ones gets min and max wrong
		*p = uint16(x)<<13 | uint16(r)
	case *uint32:
		*p = uint32(x)<<29 | uint32(r)
	case *uint64:
		*p = uint64(x)<<61 | uint64(r)
	case *bool:
		*p = (x+r)%2 == 0
	case *complex128:
		*p = complex(float64(x), float64(r))
	}
	return z
}

func data[T any](r, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = val[T](r, i)
	}
	return s
}

// reduced is what a reduction of every rank's data gives, by the host
// kernel in rank order.
func reduced[T any](size, n int, dt reduceop.DType, op reduceop.Op) []T {
	acc := data[T](0, n)
	for r := 1; r < size; r++ {
		src := data[T](r, n)
		rop := op
		if op == reduceop.Avg {
			rop = reduceop.Sum
		}
		if err := (reduceop.Host{}).Reduce(dt, rop, bytesOf(acc), bytesOf(src)); err != nil {
			panic(err)
		}
	}
	if op == reduceop.Avg {
		if err := (reduceop.Host{}).Scale(dt, bytesOf(acc), size); err != nil {
			panic(err)
		}
	}
	return acc
}

var counts = []int{0, 1, 7, 1001}

func allReduceCase[T comparable](t *testing.T, c *goccl.Comm, dt reduceop.DType, ops ...reduceop.Op) {
	ctx := context.Background()
	for _, op := range ops {
		for _, n := range counts {
			buf := data[T](c.Rank(), n)
			if err := c.AllReduce(ctx, buf, op); err != nil {
				t.Fatalf("%v %v n=%d: %v", dt, op, n, err)
			}
			if want := reduced[T](c.Size(), n, dt, op); !slices.Equal(buf, want) {
				t.Fatalf("%v %v n=%d: got %v, want %v", dt, op, n, head(buf), head(want))
			}
		}
	}
}

func head[T any](s []T) []T { return s[:min(len(s), 8)] }

func TestMPIAllReduce(t *testing.T) {
	c := need(t)
	allReduceCase[float32](t, c, reduceop.Float32, reduceop.Sum, reduceop.Max, reduceop.Min, reduceop.Avg)
	allReduceCase[float64](t, c, reduceop.Float64, reduceop.Sum, reduceop.Prod)
	allReduceCase[int32](t, c, reduceop.Int32, reduceop.Sum, reduceop.Prod, reduceop.Min, reduceop.BXor)
	allReduceCase[int64](t, c, reduceop.Int64, reduceop.Sum, reduceop.Max)
	allReduceCase[uint8](t, c, reduceop.Uint8, reduceop.BAnd, reduceop.BOr, reduceop.Max, reduceop.Min)
	allReduceCase[uint16](t, c, reduceop.Uint16, reduceop.Min, reduceop.Max)
	allReduceCase[uint32](t, c, reduceop.Uint32, reduceop.Min, reduceop.Max, reduceop.Sum)
	allReduceCase[uint64](t, c, reduceop.Uint64, reduceop.Min, reduceop.Max)
	allReduceCase[bool](t, c, reduceop.Bool, reduceop.Min, reduceop.Max, reduceop.BAnd, reduceop.BOr, reduceop.BXor)
	allReduceCase[complex128](t, c, reduceop.Complex128, reduceop.Sum, reduceop.Avg)
	if got := c.BackendFor(algo.AllReduce, 8); got != "mpi" {
		t.Errorf("BackendFor = %q, want mpi", got)
	}
	if got := c.AlgorithmFor(algo.AllReduce, 8); got != "mpi" {
		t.Errorf("AlgorithmFor = %q, want mpi", got)
	}
	t.Logf("MPI library: %s", mpi.Library())
	t.Logf("MPI threading: %s", mpi.Threading())
	t.Logf("MPI reductions on goccl's own path (wrong in this MPI): %v", mpi.WrongReductions())
	// The bytes went through MPI: goccl's links carried only fingerprints
	// (32 bytes a call to one peer, of this call and of the few before it
	// that the ring had not sent yet).
	before := c.Traffic().Total().SentBytes
	if err := c.AllReduce(context.Background(), make([]float32, 1<<18), reduceop.Sum); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if sent := c.Traffic().Total().SentBytes - before; sent > 1024 {
		t.Errorf("a 1 MiB allreduce sent %d bytes over goccl's links", sent)
	}
}

// TestMPIFront: what stays goccl's over MPI: the comms logger records
// the calls (algorithm "mpi"), and a device buffer is refused before
// anything is sent.
func TestMPIFront(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	before := c.CommsLog().Len()
	if err := c.AllReduce(ctx, make([]float32, 4), reduceop.Sum); err != nil {
		t.Fatal(err)
	}
	recs := c.CommsLog().Records()
	if len(recs) != before+1 || recs[len(recs)-1].Algo != "mpi" || recs[len(recs)-1].Op != commslog.AllReduce {
		t.Errorf("comms log: %d records before, %d after, last %+v", before, len(recs), recs[len(recs)-1])
	}
	d := hostsim.New()
	defer d.Close()
	b, err := d.Alloc(reduceop.Float32, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(ctx, b, reduceop.Sum); !errors.Is(err, goccl.ErrInvalid) || !strings.Contains(err.Error(), "host buffers only") {
		t.Errorf("device buffer: %v", err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMPIHalf: float16 has no MPI type: the call runs on goccl's own
// path, beside MPI, and gives the same answer.
func TestMPIHalf(t *testing.T) {
	c := need(t)
	buf := make([]reduceop.F16, 9)
	for i := range buf {
		buf[i] = reduceop.F16FromFloat32(float32(c.Rank() + i))
	}
	if err := c.AllReduce(context.Background(), buf, reduceop.Sum); err != nil {
		t.Fatal(err)
	}
	for i, v := range buf {
		want := float32(c.Size()*i + c.Size()*(c.Size()-1)/2)
		if v.Float32() != want {
			t.Fatalf("element %d = %v, want %v", i, v.Float32(), want)
		}
	}
}

func TestMPIRooted(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	size, me := c.Size(), c.Rank()
	for _, root := range []int{0, size - 1} {
		for _, n := range counts {
			buf := data[float64](me, n)
			if err := c.Broadcast(ctx, buf, root); err != nil {
				t.Fatal(err)
			}
			if want := data[float64](root, n); !slices.Equal(buf, want) {
				t.Fatalf("broadcast root %d n=%d: %v", root, n, head(buf))
			}
			ib := data[int32](me, n)
			if err := c.Reduce(ctx, ib, reduceop.Sum, root); err != nil {
				t.Fatal(err)
			}
			want := data[int32](me, n)
			if me == root {
				want = reduced[int32](size, n, reduceop.Int32, reduceop.Sum)
			}
			if !slices.Equal(ib, want) {
				t.Fatalf("reduce root %d n=%d: %v, want %v", root, n, head(ib), head(want))
			}
			// Gather and scatter.
			send := data[float32](me, n)
			var all []float32
			if me == root {
				all = make([]float32, n*size)
			}
			if err := c.Gather(ctx, send, all, root); err != nil {
				t.Fatal(err)
			}
			if me == root {
				for r := range size {
					if !slices.Equal(all[r*n:(r+1)*n], data[float32](r, n)) {
						t.Fatalf("gather root %d n=%d: block %d", root, n, r)
					}
				}
			}
			var src []float32
			if me == root {
				src = make([]float32, n*size)
				for r := range size {
					copy(src[r*n:], data[float32](r+10, n))
				}
			}
			got := make([]float32, n)
			if err := c.Scatter(ctx, src, got, root); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, data[float32](me+10, n)) {
				t.Fatalf("scatter root %d n=%d: %v", root, n, head(got))
			}
		}
	}
}

func TestMPIAllGatherReduceScatter(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	size, me := c.Size(), c.Rank()
	for _, n := range counts {
		recv := make([]int64, n*size)
		if err := c.AllGather(ctx, data[int64](me, n), recv); err != nil {
			t.Fatal(err)
		}
		for r := range size {
			if !slices.Equal(recv[r*n:(r+1)*n], data[int64](r, n)) {
				t.Fatalf("allgather n=%d: block %d", n, r)
			}
		}
		// In place: the send is this rank's block of recv.
		inplace := make([]int64, n*size)
		copy(inplace[me*n:], data[int64](me, n))
		if err := c.AllGather(ctx, inplace[me*n:(me+1)*n], inplace); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(inplace, recv) {
			t.Fatalf("allgather in place n=%d", n)
		}
		// Reduce-scatter: rank r gets block r of the sum.
		for _, op := range []reduceop.Op{reduceop.Sum, reduceop.Avg} {
			send := data[float32](me, n*size)
			mine := make([]float32, n)
			if err := c.ReduceScatter(ctx, send, mine, op); err != nil {
				t.Fatal(err)
			}
			want := reduced[float32](size, n*size, reduceop.Float32, op)[me*n : (me+1)*n]
			if !slices.Equal(mine, want) {
				t.Fatalf("reduce-scatter %v n=%d: %v, want %v", op, n, head(mine), head(want))
			}
		}
	}
	// Uneven parts: allgatherv.
	parts := make([]any, size)
	for r := range size {
		parts[r] = make([]float64, r+2)
	}
	if err := c.AllGatherList(ctx, data[float64](me, me+2), parts); err != nil {
		t.Fatal(err)
	}
	for r := range size {
		if !slices.Equal(parts[r].([]float64), data[float64](r, r+2)) {
			t.Fatalf("allgather list: part %d = %v", r, parts[r])
		}
	}
}

func TestMPIAllToAll(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	size, me := c.Size(), c.Rank()
	for _, n := range counts {
		send := data[int32](me, n*size)
		recv := make([]int32, n*size)
		if err := c.AllToAll(ctx, send, recv); err != nil {
			t.Fatal(err)
		}
		for r := range size {
			if !slices.Equal(recv[r*n:(r+1)*n], data[int32](r, n*size)[me*n:(me+1)*n]) {
				t.Fatalf("alltoall n=%d: block from %d", n, r)
			}
		}
	}
	// Uneven splits: rank r sends r+j+1 elements to rank j (alltoallv),
	// and one rank sends nothing to anyone.
	cnt := func(from, to int) int {
		if from == size-1 {
			return 0
		}
		return from + to + 1
	}
	sc, rc := make([]int, size), make([]int, size)
	for j := range size {
		sc[j], rc[j] = cnt(me, j), cnt(j, me)
	}
	var send []uint8
	for j := range size {
		for i := range sc[j] {
			send = append(send, uint8(me*50+j*7+i))
		}
	}
	recv := make([]uint8, sum(rc))
	if err := c.AllToAllSplit(ctx, send, sc, recv, rc); err != nil {
		t.Fatal(err)
	}
	off := 0
	for j := range size {
		for i := range rc[j] {
			if recv[off+i] != uint8(j*50+me*7+i) {
				t.Fatalf("alltoallv: from %d element %d = %d", j, i, recv[off+i])
			}
		}
		off += rc[j]
	}
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

func TestMPISendRecvBarrier(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	size, me := c.Size(), c.Rank()
	right, left := (me+1)%size, (me+size-1)%size
	for _, n := range counts {
		w := c.RecvAsync(ctx, make([]float64, n), left, 7)
		got := make([]float64, n)
		w2 := c.RecvAsync(ctx, got, left, 8)
		if err := c.Send(ctx, data[float64](me+100, n), right, 7); err != nil {
			t.Fatal(err)
		}
		if err := c.Send(ctx, data[float64](me, n), right, 8); err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w2.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, data[float64](left, n)) {
			t.Fatalf("recv n=%d from %d: %v", n, left, head(got))
		}
		if err := c.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// goccl's largest tag is above MPICH's MPI_TAG_UB (2^28-1): such a
	// message goes over goccl's links, beside a small tag's over MPI.
	got := make([]int32, 5)
	wBig := c.RecvAsync(ctx, got, left, goccl.MaxTag)
	wSmall := c.RecvAsync(ctx, make([]int32, 3), left, 9)
	if err := c.Send(ctx, []int32{1, 2, 3}, right, 9); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, data[int32](me, 5), right, goccl.MaxTag); err != nil {
		t.Fatalf("send with tag %d: %v", goccl.MaxTag, err)
	}
	for _, w := range []*goccl.Work{wBig, wSmall} {
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, data[int32](left, 5)) {
		t.Fatalf("recv with tag %d from %d: %v", goccl.MaxTag, left, got)
	}
}

// TestMPIAsync: calls in flight together are issued to MPI in their
// order on every rank, whatever order their goroutines run in.
func TestMPIAsync(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	var works []*goccl.Work
	var bufs [][]float32
	for i := range 16 {
		b := data[float32](c.Rank(), 100+i*37)
		bufs = append(bufs, b)
		works = append(works, c.AllReduceAsync(ctx, b, reduceop.Sum))
	}
	for i, w := range works {
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if want := reduced[float32](c.Size(), 100+i*37, reduceop.Float32, reduceop.Sum); !slices.Equal(bufs[i], want) {
			t.Fatalf("async call %d: wrong result", i)
		}
	}
}

// TestMPIGroups: NewGroup and Split make MPI communicators of their own
// (MPI_Comm_split); their calls see their members only.
func TestMPIGroups(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	size, me := c.Size(), c.Rank()
	half := make([]int, 0, size)
	for r := range (size + 1) / 2 {
		half = append(half, r)
	}
	g, err := c.NewGroup(half)
	if err != nil {
		t.Fatal(err)
	}
	if (g != nil) != (me < (size+1)/2) {
		t.Fatalf("rank %d: group %v", me, g)
	}
	if g != nil {
		buf := []int64{int64(me), 1}
		if err := g.AllReduce(ctx, buf, reduceop.Sum); err != nil {
			t.Fatal(err)
		}
		n := int64(len(half))
		if buf[0] != n*(n-1)/2 || buf[1] != n {
			t.Fatalf("group allreduce: %v", buf)
		}
		if got := g.BackendFor(algo.AllReduce, 8); got != "mpi" {
			t.Fatalf("group BackendFor = %q", got)
		}
	}
	// Split by parity, ordered by descending rank.
	s, err := c.Split(ctx, me%2, -me)
	if err != nil {
		t.Fatal(err)
	}
	var members []int
	for r := size - 1; r >= 0; r-- {
		if r%2 == me%2 {
			members = append(members, r)
		}
	}
	if s.Size() != len(members) || s.Rank() != slices.Index(members, me) {
		t.Fatalf("split: rank %d of %d, want %d of %d", s.Rank(), s.Size(), slices.Index(members, me), len(members))
	}
	all := make([]int32, s.Size())
	if err := s.AllGather(ctx, []int32{int32(me)}, all); err != nil {
		t.Fatal(err)
	}
	for i, r := range members {
		if all[i] != int32(r) {
			t.Fatalf("split allgather: %v, want %v", all, members)
		}
	}
	if err := s.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if g != nil {
		g.Close()
	}
	s.Close()
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkDeadline: the last rank sleeps before an allreduce that the others
// make with a deadline of a second. They fail with ErrTimeout naming it.
func checkDeadline(c *goccl.Comm) {
	late := c.Size() - 1
	ctx := context.Background()
	if c.Rank() == late {
		time.Sleep(4 * time.Second)
		err := c.AllReduce(ctx, []float32{1}, reduceop.Sum)
		fmt.Printf("rank %d (asleep) then: %v\n", c.Rank(), err)
	} else {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.AllReduce(ctx, []float32{1}, reduceop.Sum)
		cancel()
		// The call is abandoned in MPI (polled) and must stay so until
		// the job ends: collections now find a dropped request's Pinner
		// still pinning, which ends the process, as it once did at random.
		for range 3 {
			runtime.GC()
			time.Sleep(50 * time.Millisecond)
		}
		var ge *goccl.Error
		ok := errors.Is(err, goccl.ErrTimeout) && errors.As(err, &ge) && ge.Peer == late
		fmt.Printf("rank %d: %v\n", c.Rank(), err)
		if ok && c.Rank() == 0 {
			fmt.Printf("MPI-CHECK ok deadline: rank 0 named rank %d\n", late)
		}
	}
	abortJob(c) // a timed-out MPI job cannot go on
}

// abortJob ends a check's job as MPI requires after a failed call: Close
// calls MPI_Abort. Rank 0 goes first, so that its line is out before
// MPI_Abort kills every rank.
func abortJob(c *goccl.Comm) {
	if c.Rank() != 0 {
		time.Sleep(2 * time.Second)
	}
	c.Close()
	os.Exit(3)
}

// checkMismatch: rank 1 broadcasts where the others allreduce. Every rank
// gets ErrMismatch, at that call or within a few calls after it, and rank
// 0's names rank 1 or says both calls.
func checkMismatch(c *goccl.Comm) {
	ctx := context.Background()
	var err error
	if c.Rank() == 1 {
		err = c.Broadcast(ctx, make([]float32, 8), 0)
	} else {
		err = c.AllReduce(ctx, make([]float32, 8), reduceop.Sum)
	}
	for i := 0; err == nil && i < 10; i++ {
		err = c.Barrier(ctx)
	}
	fmt.Printf("rank %d: %v\n", c.Rank(), err)
	msg := fmt.Sprint(err)
	if c.Rank() == 0 && errors.Is(err, goccl.ErrMismatch) && strings.Contains(msg, "broadcast") && strings.Contains(msg, "all_reduce") {
		fmt.Printf("MPI-CHECK ok mismatch: %v\n", err)
	}
	abortJob(c)
}

// TestMPISignals: a nil dereference after MPI_Init is still the Go
// runtime's panic, which a deferred recover catches: no MPI (nor the
// transport under it) has taken over SIGSEGV, which would end the
// process instead.
func TestMPISignals(t *testing.T) {
	need(t)
	var p *int
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		_ = *p
		return nil
	}()
	if err == nil || !strings.Contains(err.Error(), "nil pointer dereference") {
		t.Fatalf("nil dereference: recovered %v, want the runtime's panic", err)
	}
}
