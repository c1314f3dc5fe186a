package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

// benchDevice is one rank's device for -device: the buffers of the
// collective live there, and a stream and pinned memory move the inputs
// and results between it and the host copies that -check reads.
type benchDevice struct {
	dev    device.Device
	s      device.Stream
	k      onebit.DeviceKernel
	pinned device.Host
	close  func() error
}

// openBenchDevice opens this rank's device: a fake one on host memory
// (hostsim) or the GPU of its local rank (cuda, in a binary built with
// -tags cuda).
func openBenchDevice(kind string) (*benchDevice, error) {
	bd := &benchDevice{}
	switch kind {
	case "hostsim":
		d := hostsim.New()
		bd.dev, bd.k, bd.close = d, hostsim.OneBitKernel{}, d.Close
	case "cuda":
		c, err := cuda.OpenLocal()
		if errors.Is(err, cuda.ErrNotBuilt) {
			return nil, errors.New("-device cuda: this goccl was built without the cuda tag (go build -tags cuda ./cmd/goccl)")
		}
		if err != nil {
			return nil, fmt.Errorf("-device cuda: %w", err)
		}
		bd.dev, bd.k, bd.close = c, c.Kernel(), c.Close
	default:
		return nil, fmt.Errorf("unknown -device %q (host, hostsim or cuda)", kind)
	}
	s, err := bd.dev.NewStream()
	if err != nil {
		bd.close()
		return nil, err
	}
	bd.s = s
	return bd, nil
}

func (bd *benchDevice) Close() error {
	var errs []error
	if bd.pinned != nil {
		errs = append(errs, bd.pinned.Free())
	}
	errs = append(errs, bd.s.Destroy(), bd.close())
	return errors.Join(errs...)
}

// staging returns pinned host memory of at least n bytes.
func (bd *benchDevice) staging(n int) ([]byte, error) {
	if bd.pinned == nil || len(bd.pinned.Bytes()) < n {
		if bd.pinned != nil {
			if err := bd.pinned.Free(); err != nil {
				return nil, err
			}
			bd.pinned = nil
		}
		h, err := bd.dev.AllocHost(max(n, 1))
		if err != nil {
			return nil, err
		}
		bd.pinned = h
	}
	return bd.pinned.Bytes()[:n], nil
}

// alloc returns a device buffer of dt as long as the host slice, or nil
// for a nil slice.
func (bd *benchDevice) alloc(dt reduceop.DType, host any) (device.Buffer, error) {
	if host == nil {
		return nil, nil
	}
	return bd.dev.Alloc(dt, sliceLen(host))
}

// upload copies the host slice into b; download copies b into it.
func (bd *benchDevice) upload(ctx context.Context, b device.Buffer, host any) error {
	src := goccl.Bytes(host)
	mem, err := bd.staging(len(src))
	if err != nil {
		return err
	}
	copy(mem, src)
	if err := bd.s.CopyFromHost(b, 0, mem); err != nil {
		return err
	}
	return bd.s.Synchronize(ctx)
}

func (bd *benchDevice) download(ctx context.Context, host any, b device.Buffer) error {
	dst := goccl.Bytes(host)
	mem, err := bd.staging(len(dst))
	if err != nil {
		return err
	}
	if err := bd.s.CopyToHost(mem, b, 0); err != nil {
		return err
	}
	if err := bd.s.Synchronize(ctx); err != nil {
		return err
	}
	copy(dst, mem)
	return nil
}

// onDevice moves b's buffers to bd: device buffers for send and recv, and
// for -op onebit the device state.
func (b *benchBufs) onDevice(bd *benchDevice) error {
	b.dev = bd
	var err error
	if b.dsend, err = bd.alloc(b.cfg.dtype, b.send); err != nil {
		return err
	}
	if b.drecv, err = bd.alloc(b.cfg.dtype, b.recv); err != nil {
		return err
	}
	if b.cfg.op == "onebit" {
		if b.dstate, err = onebit.NewDeviceState(bd.dev, bd.k, b.count, b.n); err != nil {
			return err
		}
	}
	return nil
}

// free releases the device buffers of b.
func (b *benchBufs) free() error {
	if b.dev == nil {
		return nil
	}
	var errs []error
	for _, x := range []device.Buffer{b.dsend, b.drecv} {
		if x != nil {
			errs = append(errs, x.Free())
		}
	}
	if b.dstate != nil {
		errs = append(errs, b.dstate.Free())
	}
	return errors.Join(errs...)
}

// args returns what the collective is given: the host slices, or their
// device buffers (nil stays an untyped nil).
func (b *benchBufs) args() (send, recv any) {
	if b.dev == nil {
		return b.send, b.recv
	}
	if b.dsend != nil {
		send = b.dsend
	}
	if b.drecv != nil {
		recv = b.drecv
	}
	return send, recv
}
