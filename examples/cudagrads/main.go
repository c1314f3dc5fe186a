//go:build cuda

package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/reduceop"
)

func main() {
	n := flag.Int("n", 1<<20, "gradient elements (float32)")
	flag.Parse()
	if err := run(context.Background(), *n); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, n int) error {
	comm, err := goccl.Init(ctx)
	if err != nil {
		return err
	}
	defer comm.Close()

	// The framework's side: the primary context, current on this thread,
	// its memory and its stream.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := cu.GetDevice(cuda.LocalDevice())
	if err != nil {
		return err
	}
	primary, err := dev.RetainPrimaryCtx()
	if err != nil {
		return err
	}
	defer dev.ReleasePrimaryCtx()
	if err := cu.SetCurrentContext(primary); err != nil {
		return err
	}
	grads, err := cu.MemAlloc(int64(4 * n))
	if err != nil {
		return err
	}
	defer cu.MemFree(grads)
	stream, err := cu.MakeStream(cu.NonBlocking)
	if err != nil {
		return err
	}
	defer stream.Destroy()

	// The "producer": the gradients of this rank.
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(comm.Rank() + 1)
	}
	if err := cu.MemcpyHtoDAsync(grads, unsafe.Pointer(&host[0]), int64(4*n), stream); err != nil {
		return err
	}

	// goccl's side: the same device's primary context, the framework's
	// memory and stream wrapped, not copied.
	gpu, err := cuda.OpenLocal()
	if err != nil {
		return err
	}
	defer gpu.Close()
	buf, err := gpu.Wrap(uintptr(grads), reduceop.Float32, n)
	if err != nil {
		return err
	}
	s, err := gpu.WrapStream(*(*uintptr)(unsafe.Pointer(&stream)))
	if err != nil {
		return err
	}
	w := comm.OnStream(s).AllReduce(ctx, buf, reduceop.Avg)

	// The "consumer", queued right away: it runs after the allreduce.
	if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&host[0]), grads, int64(4*n), stream); err != nil {
		return err
	}
	if err := w.Wait(ctx); err != nil {
		return err
	}
	if err := stream.Synchronize(); err != nil {
		return err
	}
	want := float32(comm.Size()+1) / 2
	for i, x := range host {
		if x != want {
			return fmt.Errorf("rank %d: element %d is %v, want %v", comm.Rank(), i, x, want)
		}
	}
	fmt.Printf("rank %d of %d: %d gradients averaged on the framework's stream\n", comm.Rank(), comm.Size(), n)
	return nil
}
