package goccl_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/reduceop"
)

// randomBytes returns n elements of dt with seeded random bits (NaNs and
// all), the same for the same (seed, rank).
func randomBytes(dt reduceop.DType, n int, seed uint64, rank int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(rank)))
	b := make([]byte, n*dt.Size())
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if dt == reduceop.Bool {
		for i := range b {
			b[i] &= 1 // a Go bool holds 0 or 1
		}
	}
	if dt == reduceop.Float32 || dt == reduceop.Float64 {
		// Keep most values finite so sums say something, but leave a few
		// special bit patterns in.
		for i := 0; i+dt.Size() <= len(b); i += dt.Size() {
			if r.IntN(64) != 0 {
				b[i+dt.Size()-1] &= 0x3f // exponent well below overflow
			}
		}
	}
	return b
}

// typed returns b as a Go slice of dt's element type, sharing memory.
func typed(dt reduceop.DType, b []byte) any {
	p := unsafe.Pointer(unsafe.SliceData(b))
	n := len(b) / dt.Size()
	switch dt {
	case reduceop.Float32:
		return unsafe.Slice((*float32)(p), n)
	case reduceop.Float64:
		return unsafe.Slice((*float64)(p), n)
	case reduceop.Float16:
		return unsafe.Slice((*reduceop.F16)(p), n)
	case reduceop.BFloat16:
		return unsafe.Slice((*reduceop.BF16)(p), n)
	case reduceop.Int8:
		return unsafe.Slice((*int8)(p), n)
	case reduceop.Uint8:
		return b
	case reduceop.Int32:
		return unsafe.Slice((*int32)(p), n)
	case reduceop.Int64:
		return unsafe.Slice((*int64)(p), n)
	case reduceop.Uint16:
		return unsafe.Slice((*uint16)(p), n)
	case reduceop.Uint32:
		return unsafe.Slice((*uint32)(p), n)
	case reduceop.Uint64:
		return unsafe.Slice((*uint64)(p), n)
	case reduceop.Int16:
		return unsafe.Slice((*int16)(p), n)
	case reduceop.Bool:
		return unsafe.Slice((*bool)(p), n)
	case reduceop.Complex64:
		return unsafe.Slice((*complex64)(p), n)
	case reduceop.Complex128:
		return unsafe.Slice((*complex128)(p), n)
	}
	panic(dt)
}

// deviceAllReduce runs AllReduce on n ranks twice, on host slices and on
// device buffers of kind k holding the same bytes, and fails unless every
// rank ends with the same bytes both ways, and the device call ran where
// Comm.BackendOn says it does (k.backend). shared: every rank on one
// device.
func deviceAllReduce(t *testing.T, k *deviceKind, n int, a algo.Algorithm, dt reduceop.DType, op reduceop.Op, count int, shared bool) {
	t.Helper()
	host := make([][]byte, n)
	devOut := make([][]byte, n)
	for r := range n {
		host[r] = k.inputBytes(dt, count, 7, r)
	}
	var said string
	since := k.ranSoFar()
	runRanks(t, n, a, func(ctx context.Context, c *goccl.Comm) error {
		mine := bytes.Clone(host[c.Rank()])
		if err := c.AllReduce(ctx, typed(dt, mine), op); err != nil {
			return fmt.Errorf("host: %w", err)
		}
		b, err := k.alloc(k.dev(t, c.Rank(), shared), dt, count, host[c.Rank()])
		if err != nil {
			return err
		}
		defer b.Free()
		if be := c.BackendOn(algo.AllReduce, b, op); c.Rank() == 0 {
			said = be
		}
		if err := c.AllReduce(ctx, b, op); err != nil {
			return fmt.Errorf("device: %w", err)
		}
		if devOut[c.Rank()], err = k.read(b); err != nil {
			return err
		}
		host[c.Rank()] = mine
		return nil
	}, k.opts...)
	for r := range n {
		if !bytes.Equal(devOut[r], host[r]) {
			t.Fatalf("rank %d: device result differs from host result", r)
		}
	}
	k.checkRan(t, said, k.backend(true, dt, op), since, n)
}

func TestDeviceAllReduceMatchesHost(t *testing.T) {
	forDeviceKinds(t, func(t *testing.T, k *deviceKind) {
		defer k.done()
		big := 1<<20/4*3 + 5 // three chunks and a bit of float32, a count no world size divides
		for _, a := range k.algos(algo.AllReduce) {
			for _, n := range []int{1, 2, 3, 4, 5} {
				for _, count := range []int{0, 1, 7, 1031, big} {
					if count == big && n > 3 && testing.Short() {
						continue
					}
					cases := []caseSpec{{reduceop.Float32, reduceop.Sum}}
					if count == 1031 {
						cases = append(cases, caseSpec{reduceop.Float64, reduceop.Avg}, caseSpec{reduceop.Int32, reduceop.Max},
							caseSpec{reduceop.BFloat16, reduceop.Sum}, caseSpec{reduceop.Uint8, reduceop.BXor})
					}
					for _, cs := range cases {
						for _, sharing := range []bool{false, true} {
							if sharing && (count != 1031 || cs.op != reduceop.Sum) {
								continue
							}
							name := fmt.Sprintf("%s/n=%d/count=%d/%v/%v/shared=%v", cmp.Or(a, "backend"), n, count, cs.dt, cs.op, sharing)
							t.Run(name, func(t *testing.T) {
								deviceAllReduce(t, k, n, a, cs.dt, cs.op, count, sharing) // ranks may share one device, as NCCL does not allow
							})
						}
					}
				}
			}
		}
	})
}

// A rank with a host buffer and one with a device buffer cut their
// messages differently: the call fails with ErrMismatch on both.
func TestDeviceAndHostBufferMismatch(t *testing.T) {
	d := hostsim.New()
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, 2)
	goccl.RunLocal(ctx, 2, func(ctx context.Context, c *goccl.Comm) error {
		if c.Rank() == 0 {
			errs[0] = c.AllReduce(ctx, make([]float32, 100), reduceop.Sum)
			return nil
		}
		b, err := d.Alloc(reduceop.Float32, 100)
		if err != nil {
			return err
		}
		defer b.Free()
		errs[1] = c.AllReduce(ctx, b, reduceop.Sum)
		return nil
	}, goccl.WithTimeout(10*time.Second))
	for r, err := range errs {
		if !errors.Is(err, goccl.ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch (all: %v)", r, err, errs)
		}
	}
}

// The device data path overlaps the copies, the wire and the reductions of
// neighbouring chunks. With every copy and every kernel made to take lat
// (hostsim's injected latency), a two-rank ring allreduce of 8 MiB of
// float32 (8 chunks of 1 MiB through each rank's lanes) must take well
// under the sum of the latencies of the work its device ran, which is what
// it would take done one piece at a time. The bound, 3/4 of that sum, leaves
// room for a loaded machine: the pipelined schedule needs about half.
func TestDeviceAllReduceOverlaps(t *testing.T) {
	const lat = 20 * time.Millisecond // long beside the scheduling gaps of a loaded machine
	// NoIPC: the staged pipeline is what this test watches (between ranks
	// of one process the messages would otherwise go device to device).
	devs := []*hostsim.Device{
		hostsim.New(hostsim.Latency{Copy: lat, Kernel: lat}, hostsim.NoIPC),
		hostsim.New(hostsim.Latency{Copy: lat, Kernel: lat}, hostsim.NoIPC),
	}
	for _, d := range devs {
		defer d.Close()
	}
	const count = 8 << 20 / 4
	runRanks(t, 2, algo.Ring, func(ctx context.Context, c *goccl.Comm) error {
		d := devs[c.Rank()]
		b, err := d.Alloc(reduceop.Float32, count)
		if err != nil {
			return err
		}
		defer b.Free()
		if err := c.AllReduce(ctx, b, reduceop.Sum); err != nil { // warm: streams, slots
			return err
		}
		d.StartTimeline()
		return c.AllReduce(ctx, b, reduceop.Sum)
	})
	for r, d := range devs {
		spans := d.Timeline()
		var serial time.Duration
		first, last := spans[0].Start, spans[0].End
		overlapped := false
		for i, s := range spans {
			switch s.Kind {
			case hostsim.KindCopyToHost, hostsim.KindCopyFromHost, hostsim.KindCopy, hostsim.KindReduce, hostsim.KindScale:
				// What the piece took, not lat: on a loaded machine a sleep
				// overruns, and one after another they would overrun alike.
				serial += s.End.Sub(s.Start)
			}
			if s.Start.Before(first) {
				first = s.Start
			}
			if s.End.After(last) {
				last = s.End
			}
			for _, o := range spans[:i] {
				if o.Stream != s.Stream && o.Start.Before(s.End) && s.Start.Before(o.End) && o.End.Sub(o.Start) >= lat && s.End.Sub(s.Start) >= lat {
					overlapped = true
				}
			}
		}
		took := last.Sub(first)
		t.Logf("rank %d: %d pieces of device work, %v one after another, %v pipelined", r, len(spans), serial, took)
		if !overlapped {
			t.Errorf("rank %d: no two pieces of device work overlapped", r)
		}
		if took > serial*3/4 {
			t.Errorf("rank %d: took %v, want well under the serial %v (bound 3/4 of it)", r, took, serial)
		}
	}
}

// deviceCollective is one collective run on a send and a recv buffer (the
// same buffer for the in-place ones), with the lengths it needs.
type deviceCollective struct {
	coll     algo.Collective
	sendLen  func(n, count int) int
	recvLen  func(n, count int) int // 0: in place on send
	run      func(ctx context.Context, c *goccl.Comm, send, recv any, op reduceop.Op) error
	reducing bool
}

var deviceCollectives = map[string]deviceCollective{
	"broadcast": {algo.Broadcast, func(n, c int) int { return c }, nil,
		func(ctx context.Context, c *goccl.Comm, send, _ any, _ reduceop.Op) error {
			return c.Broadcast(ctx, send, c.Size()-1)
		}, false},
	"reduce": {algo.Reduce, func(n, c int) int { return c }, nil,
		func(ctx context.Context, c *goccl.Comm, send, _ any, op reduceop.Op) error {
			return c.Reduce(ctx, send, op, c.Size()/2)
		}, true},
	"allgather": {algo.AllGather, func(n, c int) int { return c }, func(n, c int) int { return n * c },
		func(ctx context.Context, c *goccl.Comm, send, recv any, _ reduceop.Op) error {
			return c.AllGather(ctx, send, recv)
		}, false},
	"alltoall": {algo.AllToAll, func(n, c int) int { return n * c }, func(n, c int) int { return n * c },
		func(ctx context.Context, c *goccl.Comm, send, recv any, _ reduceop.Op) error {
			return c.AllToAll(ctx, send, recv)
		}, false},
	"gather": {algo.Gather, func(n, c int) int { return c }, func(n, c int) int { return n * c },
		func(ctx context.Context, c *goccl.Comm, send, recv any, _ reduceop.Op) error {
			return c.Gather(ctx, send, recv, c.Size()-1)
		}, false},
	"scatter": {algo.Scatter, func(n, c int) int { return n * c }, func(n, c int) int { return c },
		func(ctx context.Context, c *goccl.Comm, send, recv any, _ reduceop.Op) error {
			return c.Scatter(ctx, send, recv, 0)
		}, false},
	"reducescatter": {algo.ReduceScatter, func(n, c int) int { return n * c }, func(n, c int) int { return c },
		func(ctx context.Context, c *goccl.Comm, send, recv any, op reduceop.Op) error {
			return c.ReduceScatter(ctx, send, recv, op)
		}, true},
}

// Every collective on the device data path gives the host result, byte for
// byte, with every algorithm that implements it (or, on a backend, with
// the backend's).
func TestDeviceCollectivesMatchHost(t *testing.T) {
	forDeviceKinds(t, func(t *testing.T, k *deviceKind) {
		defer k.done()
		for name, dc := range deviceCollectives {
			for _, a := range k.algos(dc.coll) {
				for _, n := range []int{1, 2, 3, 4} {
					for _, count := range []int{0, 1, 13, 1<<18 + 3} {
						cases := []caseSpec{{reduceop.Float32, reduceop.Sum}}
						if count == 13 && dc.reducing {
							cases = append(cases, caseSpec{reduceop.Float64, reduceop.Avg}, caseSpec{reduceop.Int8, reduceop.Min})
						}
						if count == 13 && !dc.reducing {
							// Dtypes without device kernels move all the same.
							cases = append(cases, caseSpec{reduceop.Complex128, 0}, caseSpec{reduceop.Bool, 0}, caseSpec{reduceop.Uint16, 0})
						}
						for _, cs := range cases {
							t.Run(fmt.Sprintf("%s/%s/n=%d/count=%d/%v/%v", name, cmp.Or(a, "backend"), n, count, cs.dt, cs.op), func(t *testing.T) {
								deviceCollectiveMatchesHost(t, k, dc, a, n, count, cs)
							})
						}
					}
				}
			}
		}
	})
}

func deviceCollectiveMatchesHost(t *testing.T, k *deviceKind, dc deviceCollective, a algo.Algorithm, n, count int, cs caseSpec) {
	sl := dc.sendLen(n, count)
	rl := 0
	if dc.recvLen != nil {
		rl = dc.recvLen(n, count)
	}
	hostOut, devOut := make([][]byte, n), make([][]byte, n)
	var said string
	since := k.ranSoFar()
	runRanks(t, n, a, func(ctx context.Context, c *goccl.Comm) error {
		r := c.Rank()
		in := k.inputBytes(cs.dt, sl, 11, r)
		hs, hr := bytes.Clone(in), make([]byte, rl*cs.dt.Size())
		var send, recv any = typed(cs.dt, hs), typed(cs.dt, hr)
		if dc.recvLen == nil {
			recv = send
		}
		if err := dc.run(ctx, c, send, recv, cs.op); err != nil {
			return fmt.Errorf("host: %w", err)
		}
		d := k.dev(t, r, true)
		ds, err := k.alloc(d, cs.dt, sl, in)
		if err != nil {
			return err
		}
		defer ds.Free()
		var dsend, drecv device.Buffer = ds, ds
		if dc.recvLen != nil { // as the host's, zeros: a rank whose recv the call leaves alone (gather's) has them
			if drecv, err = k.alloc(d, cs.dt, rl, hr); err != nil {
				return err
			}
			defer drecv.Free()
		}
		if be := c.BackendOn(dc.coll, drecv, cs.op); r == 0 {
			said = be
		}
		if err := dc.run(ctx, c, dsend, drecv, cs.op); err != nil {
			return fmt.Errorf("device: %w", err)
		}
		hostOut[r] = hr
		if dc.recvLen == nil {
			hostOut[r] = hs
		}
		devOut[r], err = k.read(drecv)
		return err
	}, k.opts...)
	for r := range n {
		if !bytes.Equal(hostOut[r], devOut[r]) {
			t.Fatalf("rank %d: device result differs from host result", r)
		}
	}
	k.checkRan(t, said, k.backend(dc.reducing, cs.dt, cs.op), since, n)
}

// BenchmarkDeviceAllReduceHostsim is the device data path's own cost:
// ranks as goroutines over transport/mem, each with a hostsim device of no
// latency, so that what is measured is the lanes, slots, events and
// stream goroutines (the copies are host memcpys). Compare with
// BenchmarkAllReduceMem at the same sizes.
// BenchmarkDeviceAllReduceHostsim: two goroutine ranks, each with a
// hostsim device, ring allreduce of float32 sum on device buffers, through
// IPC (device to device, the default between ranks of one process) and
// staged (hostsim.NoIPC: device -> pinned -> wire -> pinned -> device).
// Compare with BenchmarkAllReduceMem on host slices for what the data
// path costs above the algorithm.
func BenchmarkDeviceAllReduceHostsim(b *testing.B) {
	for _, path := range []string{"ipc", "staged"} {
		for _, size := range []int{8, 64 << 10, 4 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("n=2/ring/%s/%dB", path, size), func(b *testing.B) {
				benchDeviceAllReduce(b, size, path == "staged")
			})
		}
	}
}

func benchDeviceAllReduce(b *testing.B, size int, staged bool) {
	{
		{
			comms, err := goccl.NewLocal(2, goccl.WithAlgorithm(algo.Ring))
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			ctx := context.Background()
			b.SetBytes(int64(size))
			var wg sync.WaitGroup
			ready := make(chan struct{})
			for _, c := range comms {
				var opts []hostsim.Option
				if staged {
					opts = append(opts, hostsim.NoIPC)
				}
				d := hostsim.New(opts...)
				defer d.Close()
				buf, err := d.Alloc(reduceop.Float32, size/4)
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := c.AllReduce(ctx, buf, reduceop.Sum); err != nil { // warm
						b.Error(err)
						return
					}
					<-ready
					for i := 0; i < b.N; i++ {
						if err := c.AllReduce(ctx, buf, reduceop.Sum); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			b.ResetTimer()
			close(ready)
			wg.Wait()
		}
	}
}
