package goccl_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/reduceop"
)

// deviceKind is where the device suites (TestDeviceAllReduceMatchesHost,
// TestDeviceCollectivesMatchHost) put their buffers and what runs their
// calls: hostsim devices on goccl's own device path, always; and, in a
// build with -tags cuda where GOCCL_NCCL_LIB names a library
// (scripts/nccl-check.sh: the fake NCCL and the fake CUDA), CUDA buffers
// on the NCCL backend (device_nccl_test.go), under the subtest "nccl".
// The suites are one: each kind runs every case, against the host result.
type deviceKind struct {
	name string // the subtest the kind's cases run under; "" for hostsim's, whose names stay
	opts []goccl.Option
	// dev returns rank r's device; shared: one device for every rank of
	// the test (hostsim can share one, as NCCL does not allow; the fake
	// CUDA has only one).
	dev  func(t *testing.T, r int, shared bool) device.Device
	done func() // frees the devices after a test
	fill func(b device.Buffer, data []byte) error
	read func(b device.Buffer) ([]byte, error)
	// exact: the float inputs the suites reduce are small integers, so
	// that a library whose order of reduction is not goccl's (NCCL's)
	// gives the host's bytes.
	exact bool
	// algos lists the algorithms a collective's cases run with: every
	// one that implements it on goccl's path, one pass ("": the cost
	// model) where the backend picks its own.
	algos func(algo.Collective) []algo.Algorithm
	// backend names the library a call runs on, as Comm.BackendOn must
	// say it: "goccl", or the backend's for the calls it takes.
	backend func(reducing bool, dt reduceop.DType, op reduceop.Op) string
	// ran counts the calls this process has issued on the backend so
	// far (nil: none can be): a call BackendOn gave to the backend must
	// have run there, on every rank, and no other.
	ran func() uint64
}

// deviceKinds are the kinds this test binary runs the device suites on.
var deviceKinds = []*deviceKind{hostsimKind()}

func hostsimKind() *deviceKind {
	k := &deviceKind{algos: algorithmsFor,
		backend: func(bool, reduceop.DType, reduceop.Op) string { return "goccl" },
		fill: func(b device.Buffer, data []byte) error {
			copy(b.(*hostsim.Buffer).Bytes(), data)
			return nil
		},
		read: func(b device.Buffer) ([]byte, error) { return append([]byte(nil), b.(*hostsim.Buffer).Bytes()...), nil },
	}
	var mu sync.Mutex // the ranks ask for their devices at once
	var devs []*hostsim.Device
	var shared *hostsim.Device
	k.dev = func(t *testing.T, r int, share bool) device.Device {
		mu.Lock()
		defer mu.Unlock()
		if share {
			if shared == nil {
				shared = hostsim.New()
			}
			return shared
		}
		for len(devs) <= r {
			devs = append(devs, nil)
		}
		if devs[r] == nil {
			devs[r] = hostsim.New()
		}
		return devs[r]
	}
	k.done = func() {
		for _, d := range append(devs, shared) {
			if d != nil {
				d.Close()
			}
		}
		devs, shared = nil, nil
	}
	return k
}

// forDeviceKinds runs f for each kind: hostsim's directly, the others
// each under a subtest of their name.
func forDeviceKinds(t *testing.T, f func(t *testing.T, k *deviceKind)) {
	for _, k := range deviceKinds {
		if k.name == "" {
			f(t, k)
			continue
		}
		t.Run(k.name, func(t *testing.T) { f(t, k) })
	}
}

// inputBytes is rank's input of n elements of dt for a kind: randomBytes,
// or for an exact kind, floats that are small integers (integers reduce
// to the same bits in any order as they are).
func (k *deviceKind) inputBytes(dt reduceop.DType, n int, seed uint64, rank int) []byte {
	if !k.exact || !dt.IsFloat() {
		return randomBytes(dt, n, seed, rank)
	}
	r := rand.New(rand.NewPCG(seed, uint64(rank)))
	b := make([]byte, n*dt.Size())
	for i := range n {
		x := float32(r.IntN(4))
		switch dt {
		case reduceop.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		case reduceop.Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(x)))
		case reduceop.Float16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(reduceop.F16FromFloat32(x)))
		case reduceop.BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(reduceop.BF16FromFloat32(x)))
		}
	}
	return b
}

// alloc is a buffer of rank r's device holding data (n elements of dt).
func (k *deviceKind) alloc(d device.Device, dt reduceop.DType, n int, data []byte) (device.Buffer, error) {
	b, err := d.Alloc(dt, n)
	if err == nil && len(data) > 0 {
		if err = k.fill(b, data); err != nil {
			b.Free()
		}
	}
	return b, err
}

// ranSoFar is k.ran, 0 where nothing runs on a backend.
func (k *deviceKind) ranSoFar() uint64 {
	if k.ran == nil {
		return 0
	}
	return k.ran()
}

// checkRan fails t unless a test's one device call ran where BackendOn
// said and where the kind says it must: got is what BackendOn said (on
// rank 0; every rank must agree), since is k.ranSoFar before the test,
// n its ranks.
func (k *deviceKind) checkRan(t *testing.T, got, want string, since uint64, n int) {
	t.Helper()
	if got != want {
		t.Errorf("BackendOn says %q, want %q", got, want)
	}
	calls, wantCalls := k.ranSoFar()-since, uint64(0)
	if got != "goccl" {
		wantCalls = uint64(n)
	}
	if calls != wantCalls {
		t.Errorf("%d calls ran on the backend, want %d (BackendOn says %q)", calls, wantCalls, got)
	}
}
