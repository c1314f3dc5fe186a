package onebit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// DeviceKernel runs the steps of the compressed allreduce on device
// buffers, enqueued on a stream, with the scale kept in a one-element
// float32 device buffer instead of a Go value: each method computes what
// the Kernel method of its name computes (see Kernel for the loops), and
// CompensateNormOn also writes the scale, rms of err, where the other
// steps read it:
//
//	CompensateNormOn(s, err, x, ss, scale)  err += x; ss[0] = Σ err²; scale[0] = √ss[0] / √len(err)
//	PackUpdateOn(s, bits, err, scale)       bits = signs of err; err -= ±scale[0]
//	AccumulateSignsOn(s, dst, bits, scale)  dst += ±scale[0]
//	DecompressOn(s, dst, bits, scale)       dst = ±scale[0]
//
// x and ss may be nil. device/cuda's Kernel implements it with our CUDA
// kernels, device/hostsim's OneBitKernel with HostKernel's loops.
type DeviceKernel interface {
	CompensateNormOn(s device.Stream, err, x, ss, scale device.Buffer) error
	PackUpdateOn(s device.Stream, bits, err, scale device.Buffer) error
	AccumulateSignsOn(s device.Stream, dst, bits, scale device.Buffer) error
	DecompressOn(s device.Stream, dst, bits, scale device.Buffer) error
}

// DeviceState is State for a tensor in device memory: the same error
// feedback, in buffers on one device, for CompressedAllReduceOn. Its
// buffers must be Slicers (device.Sub), as those of device/cuda and
// device/hostsim are. Free it when the tensor goes.
type DeviceState struct {
	n, padded, world int
	rank             int  // the rank whose errors it holds, -1 for none
	zeroed           bool // the error buffers hold errors (else they are zeroed first)
	last             bool // the buffers below hold the last step's scales and signs

	dev device.Device
	k   DeviceKernel

	workerErr, serverErr device.Buffer // float32: padded, padded/world
	sendBits, recvBits   device.Buffer // uint8: padded/8 each
	serverAcc            device.Buffer // float32: padded/world
	serverBits, gathered device.Buffer // uint8: padded/world/8, padded/8
	scale                device.Buffer // float32: 1
	scales, sscales      device.Buffer // float32: world (worker, server scales)
	wscaled              device.Buffer // float32: world, worker scale j times 1/world

	recvChunk, gatherChunk []device.Buffer // chunk j of recvBits and gathered
	wscale, sscale         []device.Buffer // element j of wscaled and sscales

	pin   device.Host // 8*world bytes: the worker scales down, scaled back up
	zeros device.Host // zeroes for the error buffers

	all []device.Buffer // every buffer allocated, for Free
}

// NewDeviceState allocates on d the state for a device tensor of n
// float32 elements compressed over worldSize ranks, padded as NewState
// pads, whose steps k runs. The error buffers start at zero (they are
// zeroed on the stream of the first call).
func NewDeviceState(d device.Device, k DeviceKernel, n, worldSize int) (*DeviceState, error) {
	switch {
	case d == nil || k == nil:
		return nil, errors.New("onebit: NewDeviceState: nil device or kernel")
	case worldSize < 1:
		return nil, fmt.Errorf("onebit: NewDeviceState: world size %d < 1", worldSize)
	case n < 0:
		return nil, fmt.Errorf("onebit: NewDeviceState: negative length %d", n)
	}
	padded := PaddedLen(n, worldSize)
	chunk := padded / worldSize
	s := &DeviceState{n: n, padded: padded, world: worldSize, rank: -1, dev: d, k: k}
	err := s.alloc(chunk)
	if err != nil {
		s.Free()
		return nil, fmt.Errorf("onebit: NewDeviceState on %s: %w", d, err)
	}
	return s, nil
}

func (s *DeviceState) alloc(chunk int) error {
	p, cb := s.world, chunk/8
	var err error
	buf := func(dt reduceop.DType, n int) device.Buffer {
		if err != nil {
			return nil
		}
		var b device.Buffer
		if b, err = s.dev.Alloc(dt, n); err == nil {
			s.all = append(s.all, b)
		}
		return b
	}
	sub := func(b device.Buffer, lo, hi int) device.Buffer {
		if err != nil {
			return nil
		}
		var v device.Buffer
		v, err = device.Sub(b, lo, hi)
		return v
	}
	s.workerErr = buf(reduceop.Float32, s.padded)
	s.serverErr = buf(reduceop.Float32, chunk)
	s.sendBits = buf(reduceop.Uint8, s.padded/8)
	s.recvBits = buf(reduceop.Uint8, s.padded/8)
	s.serverAcc = buf(reduceop.Float32, chunk)
	s.serverBits = buf(reduceop.Uint8, cb)
	s.gathered = buf(reduceop.Uint8, s.padded/8)
	s.scale = buf(reduceop.Float32, 1)
	s.scales = buf(reduceop.Float32, p)
	s.sscales = buf(reduceop.Float32, p)
	s.wscaled = buf(reduceop.Float32, p)
	for j := range p {
		s.recvChunk = append(s.recvChunk, sub(s.recvBits, j*cb, (j+1)*cb))
		s.gatherChunk = append(s.gatherChunk, sub(s.gathered, j*cb, (j+1)*cb))
		s.wscale = append(s.wscale, sub(s.wscaled, j, j+1))
		s.sscale = append(s.sscale, sub(s.sscales, j, j+1))
	}
	if err != nil {
		return err
	}
	if s.pin, err = s.dev.AllocHost(8 * p); err != nil {
		return err
	}
	if s.zeros, err = s.dev.AllocHost(max(4, min(4*s.padded, zeroBlock))); err != nil {
		return err
	}
	clear(s.zeros.Bytes())
	return nil
}

// zeroBlock bounds the pinned memory the error buffers are zeroed from.
const zeroBlock = 1 << 20

// Free releases the device and pinned memory of s. No call may be using
// it, and work queued on a stream that still reads its buffers must have
// run.
func (s *DeviceState) Free() error {
	var errs []error
	for _, b := range s.all {
		errs = append(errs, b.Free())
	}
	for _, h := range []device.Host{s.pin, s.zeros} {
		if h != nil {
			errs = append(errs, h.Free())
		}
	}
	s.all, s.pin, s.zeros = nil, nil, nil
	return errors.Join(errs...)
}

// Len returns the number of elements of the tensor (before padding).
func (s *DeviceState) Len() int { return s.n }

// PaddedLen returns the padded length, the size of the worker error.
func (s *DeviceState) PaddedLen() int { return s.padded }

// WorldSize returns the number of ranks the state was made for.
func (s *DeviceState) WorldSize() int { return s.world }

// WorkerError returns the worker error buffer (PaddedLen float32
// elements), for reading or restoring a checkpoint on the device. Before
// the first call and after Reset it is zeroed by the next call, not yet.
func (s *DeviceState) WorkerError() device.Buffer { return s.workerErr }

// ServerError returns the server error of the chunk this rank owns
// (PaddedLen/WorldSize float32 elements), as WorkerError.
func (s *DeviceState) ServerError() device.Buffer { return s.serverErr }

// Reset makes the next call start from zero errors, as State.Reset: the
// state then holds no rank's errors and no last step.
func (s *DeviceState) Reset() { s.rank, s.zeroed, s.last = -1, false, false }

// The methods below give the last step's scales and signs, as State's
// methods of the same names do, as device buffers of the state (read
// them, with the stream's copies, before the next call): nil when there is
// no last step (before the first call, after Reset or a failed call).

// WorkerScales returns the worker scales of every rank in the last step
// (WorldSize float32 elements): element j is rank j's.
func (s *DeviceState) WorkerScales() device.Buffer { return s.ifLast(s.scales) }

// ServerScales returns the server scales of the last step (WorldSize
// float32 elements): element j is the scale of chunk j, which rank j owns.
func (s *DeviceState) ServerScales() device.Buffer { return s.ifLast(s.sscales) }

// WorkerSigns returns the packed signs this rank compressed its input to
// in the last step (PaddedLen/8 uint8 elements).
func (s *DeviceState) WorkerSigns() device.Buffer { return s.ifLast(s.sendBits) }

// ServerSigns returns the packed server signs of every chunk in the last
// step (PaddedLen/8 uint8 elements): chunk j is rank j's.
func (s *DeviceState) ServerSigns() device.Buffer { return s.ifLast(s.gathered) }

func (s *DeviceState) ifLast(b device.Buffer) device.Buffer {
	if !s.last {
		return nil
	}
	return b
}

// Restored tells s that its error buffers hold errors written by the
// caller (a checkpoint copied into WorkerError and ServerError), so the
// next call keeps them instead of zeroing them.
func (s *DeviceState) Restored() { s.zeroed = true }

// CompressedAllReduceOn is CompressedAllReduce for a float32 tensor in
// device memory: buf, on the device of st, is replaced by the 1-bit
// compressed average of the bufs of all ranks of c, with st's error
// feedback, computing bit for bit what CompressedAllReduce computes on the
// same values.
//
// Every per-element step runs on the device, as st's kernel, on stream s:
// the call starts after the work queued on s before it, and when it
// returns the decompression into buf is queued on s, so work queued on s
// afterwards sees the result (a host read needs s.Synchronize first). The
// exchanges are c's collectives on device buffers (the device data path):
// each waits for s, so the call blocks the host three times, at the two
// phases and to take the p worker scales through host memory (they are
// scaled by 1/p there, exactly as on the host).
//
// Inputs are checked before anything is queued or sent. If a step fails,
// the error names it and the rank; buf is then unspecified and st must be
// Reset on every rank.
func CompressedAllReduceOn(ctx context.Context, c Comm, s device.Stream, buf device.Buffer, st *DeviceState) error {
	if err := checkDevice(c, s, buf, st); err != nil {
		return err
	}
	rank, p := c.Rank(), st.world
	st.rank, st.last = rank, false
	if st.padded == 0 {
		return nil // nothing to compress: no scales, no last step
	}
	step := func(what string, err error) error {
		if err != nil {
			st.zeroed = false // half updated: the next call would misuse it
			return opErr(rank, what, err)
		}
		return nil
	}
	if !st.zeroed {
		if err := st.zero(s); err != nil {
			return step("zeroing the errors", err)
		}
		st.zeroed = true
	}
	k := st.k

	// Step 2, worker: compensate, scale, pack, new worker error.
	if err := errors.Join(
		k.CompensateNormOn(s, st.workerErr, buf, nil, st.scale),
		k.PackUpdateOn(s, st.sendBits, st.workerErr, st.scale),
		s.Synchronize(ctx),
	); err != nil {
		return step("worker compression", err)
	}

	// Step 3, phase 1: chunk j of the signs to rank j; every scale to all.
	if err := c.AllToAll(ctx, st.sendBits, st.recvBits); err != nil {
		return step("phase 1 all-to-all of signs", err)
	}
	if err := c.AllGather(ctx, st.scale, st.scales); err != nil {
		return step("phase 1 all-gather of scales", err)
	}

	// Step 4, server: the worker scales times 1/p, rounded as on the host;
	// then average the workers' chunks, compensate, compress.
	pin := st.pin.Bytes()
	if err := errors.Join(s.CopyToHost(pin[:4*p], st.scales, 0), s.Synchronize(ctx)); err != nil {
		return step("reading the worker scales", err)
	}
	inv := float32(1 / float64(p))
	for j := range p {
		w := math.Float32frombits(binary.NativeEndian.Uint32(pin[4*j:]))
		binary.NativeEndian.PutUint32(pin[4*(p+j):], math.Float32bits(w*inv))
	}
	if err := s.CopyFromHost(st.wscaled, 0, pin[4*p:8*p]); err != nil {
		return step("writing the worker scales", err)
	}
	errs := []error{k.DecompressOn(s, st.serverAcc, st.recvChunk[0], st.wscale[0])}
	for j := 1; j < p; j++ {
		errs = append(errs, k.AccumulateSignsOn(s, st.serverAcc, st.recvChunk[j], st.wscale[j]))
	}
	errs = append(errs,
		k.CompensateNormOn(s, st.serverErr, st.serverAcc, nil, st.scale),
		k.PackUpdateOn(s, st.serverBits, st.serverErr, st.scale),
		s.Synchronize(ctx))
	if err := errors.Join(errs...); err != nil {
		return step("server compression", err)
	}

	// Step 5, phase 2: every server chunk and scale to all; decompress.
	if err := c.AllGather(ctx, st.serverBits, st.gathered); err != nil {
		return step("phase 2 all-gather of signs", err)
	}
	if err := c.AllGather(ctx, st.scale, st.sscales); err != nil {
		return step("phase 2 all-gather of scales", err)
	}
	chunk := st.padded / p
	for j := range p {
		lo, hi := min(j*chunk, st.n), min((j+1)*chunk, st.n)
		if lo == hi {
			continue
		}
		out, err := device.Sub(buf, lo, hi)
		if err == nil {
			err = k.DecompressOn(s, out, st.gatherChunk[j], st.sscale[j])
		}
		if err != nil {
			return step("decompression", err)
		}
	}
	st.last = true
	return nil
}

// zero queues on s the zeroing of both error buffers from pinned zeroes.
func (st *DeviceState) zero(s device.Stream) error {
	z := st.zeros.Bytes()
	for _, b := range []device.Buffer{st.workerErr, st.serverErr} {
		for off, nb := 0, 4*b.Len(); off < nb; off += len(z) {
			if err := s.CopyFromHost(b, off, z[:min(len(z), nb-off)]); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkDevice(c Comm, s device.Stream, buf device.Buffer, st *DeviceState) error {
	const op = "onebit: compressed allreduce on device"
	switch {
	case c == nil:
		return errors.New(op + ": nil Comm")
	case st == nil:
		return errors.New(op + ": nil DeviceState")
	case s == nil:
		return errors.New(op + ": nil stream")
	case buf == nil:
		return errors.New(op + ": nil buffer")
	case st.all == nil:
		return errors.New(op + ": DeviceState was freed")
	case buf.DType() != reduceop.Float32:
		return fmt.Errorf("%w: %s rank %d: buffer is %v, want float32", ErrSize, op, c.Rank(), buf.DType())
	case buf.Device() != st.dev:
		return fmt.Errorf("%s rank %d: buffer is on %s, DeviceState on %s", op, c.Rank(), buf.Device(), st.dev)
	case buf.Len() != st.n:
		return fmt.Errorf("%w: %s rank %d: buffer has %d elements, DeviceState is for %d",
			ErrSize, op, c.Rank(), buf.Len(), st.n)
	case c.Size() != st.world:
		return fmt.Errorf("%w: %s rank %d: communicator has %d ranks, DeviceState is for %d",
			ErrSize, op, c.Rank(), c.Size(), st.world)
	case c.Rank() < 0 || c.Rank() >= c.Size():
		return fmt.Errorf("%s: rank %d out of range [0,%d)", op, c.Rank(), c.Size())
	case st.rank >= 0 && c.Rank() != st.rank:
		return fmt.Errorf("%w: %s rank %d: DeviceState holds the errors of rank %d (Reset it first)",
			ErrSize, op, c.Rank(), st.rank)
	}
	if _, ok := buf.(device.Slicer); !ok && st.padded > 0 {
		return fmt.Errorf("%s rank %d: buffer %T: %w", op, c.Rank(), buf, device.ErrNotSlicer)
	}
	return nil
}
