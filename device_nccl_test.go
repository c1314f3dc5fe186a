//go:build cuda && cgo

package goccl_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend/nccl"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/reduceop"
)

// The device suites on the NCCL backend: with GOCCL_NCCL_LIB set (as
// scripts/nccl-check.sh sets it, over the fake NCCL and the fake CUDA),
// their cases run again under the subtest "nccl", on CUDA buffers, with
// GOCCL_BACKEND=nccl. The ranks are goroutines, every one on device 0
// (the fake CUDA has one; NCCL proper would want one device a rank).
func init() {
	if os.Getenv(nccl.EnvLib) == "" {
		return
	}
	dev, err := cuda.Open(0)
	if err != nil {
		panic(fmt.Sprintf("GOCCL_NCCL_LIB is set, so the device suites run on NCCL, but CUDA does not open: %v", err))
	}
	deviceKinds = append(deviceKinds, &deviceKind{
		name:  "nccl",
		opts:  []goccl.Option{goccl.WithBackend("nccl")},
		dev:   func(*testing.T, int, bool) device.Device { return dev },
		done:  func() {},
		exact: true,
		fill: func(b device.Buffer, data []byte) error {
			return b.(*cuda.Buffer).CopyFromHost(context.Background(), 0, data)
		},
		read: func(b device.Buffer) ([]byte, error) {
			h := make([]byte, b.Len()*b.DType().Size())
			return h, b.(*cuda.Buffer).CopyToHost(context.Background(), h, 0)
		},
		algos:   func(algo.Collective) []algo.Algorithm { return []algo.Algorithm{""} },
		backend: ncclRuns,
		ran:     nccl.Issued,
	})
}

// ncclRuns is where backend/nccl's documentation says a call runs:
// NCCL, but for reductions by an op it lacks or of a dtype it has no
// name for.
func ncclRuns(reducing bool, dt reduceop.DType, op reduceop.Op) string {
	if !reducing {
		return "nccl"
	}
	switch op {
	case reduceop.BAnd, reduceop.BOr, reduceop.BXor:
		return "goccl"
	}
	switch dt {
	case reduceop.Float32, reduceop.Float64, reduceop.Float16, reduceop.BFloat16,
		reduceop.Int8, reduceop.Uint8, reduceop.Int32, reduceop.Uint32, reduceop.Int64, reduceop.Uint64:
		return "nccl"
	}
	return "goccl"
}
