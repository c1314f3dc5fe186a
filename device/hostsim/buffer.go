package hostsim

import (
	"fmt"
	"sync/atomic"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// alloc is what a Buffer from Alloc or Wrap and the buffers sliced from it
// share.
type alloc struct {
	d     *Device
	freed atomic.Bool // the Buffer that Alloc or Wrap returned was freed
	mem   []byte      // the whole memory (IPC handles give offsets into it)
	ipcID atomic.Uint64
}

// Buffer is device memory of a hostsim Device: Len elements of DType in a
// byte slice, from Device.Alloc, Device.Wrap or Buffer.Slice. It implements
// device.Buffer.
type Buffer struct {
	a     *alloc
	root  bool // returned by Alloc or Wrap, not by Slice
	dt    reduceop.DType
	n     int
	mem   []byte
	freed atomic.Bool // this Buffer was freed
}

var _ device.Slicer = (*Buffer)(nil)

// DType returns the element type.
func (b *Buffer) DType() reduceop.DType { return b.dt }

// Len returns the number of elements.
func (b *Buffer) Len() int { return b.n }

// Device returns the device that made b.
func (b *Buffer) Device() device.Device { return b.a.d }

// Slice returns elements [lo, hi) of b as a Buffer sharing b's memory. Its
// Free does nothing to the memory; freeing the Buffer it was sliced from
// (or that one's origin) ends it too. Slice panics if the range is outside
// b, as slicing does.
func (b *Buffer) Slice(lo, hi int) *Buffer {
	if lo < 0 || hi < lo || hi > b.n {
		panic(fmt.Sprintf("hostsim: slice [%d:%d] of a buffer of %d elements", lo, hi, b.n))
	}
	s := b.dt.Size()
	return &Buffer{a: b.a, dt: b.dt, n: hi - lo, mem: b.mem[lo*s : hi*s : hi*s]}
}

// Sub is Slice for device.Slicer: a range outside b is an error wrapping
// ErrRange instead of a panic.
func (b *Buffer) Sub(lo, hi int) (device.Buffer, error) {
	if lo < 0 || hi < lo || hi > b.n {
		return nil, b.a.d.errorf("sub-range", "[%d,%d) of a buffer of %d elements: %w", lo, hi, b.n, ErrRange)
	}
	return b.Slice(lo, hi), nil
}

// Bytes returns the buffer's memory. Reading or writing it is safe only
// while no work that uses the buffer is pending on any stream: after a
// Synchronize or Event.Wait that covers that work.
func (b *Buffer) Bytes() []byte { return b.mem }

// Free ends b. For the Buffer that Alloc returned it releases the memory;
// for one from Wrap or Slice it does nothing to the memory. Freeing the
// Buffer that Alloc or Wrap returned ends every Buffer sliced from it.
// A Buffer must not be used after Free: a later use, a second Free
// included, returns an error wrapping ErrFreed, and work already enqueued
// that runs after the Free fails the device (see Device).
func (b *Buffer) Free() error {
	d := b.a.d
	if err := d.check("free"); err != nil {
		return err
	}
	if b.freed.Swap(true) || b.a.freed.Load() {
		return d.errorf("free", ErrFreed)
	}
	if b.root {
		b.a.freed.Store(true)
		if id := b.a.ipcID.Load(); id != 0 {
			exported.Delete(id)
		}
	}
	return nil
}

// gone reports whether b was freed, directly or through its origin.
func (b *Buffer) gone() bool { return b.freed.Load() || b.a.freed.Load() }

// Host is host memory from Device.AllocHost. It implements device.Host.
type Host struct {
	d     *Device
	b     []byte
	freed atomic.Bool
}

var _ device.Host = (*Host)(nil)

// Bytes returns the memory. It stays valid (as Go memory always does), but
// after Free the device's copies refuse it.
func (h *Host) Bytes() []byte { return h.b }

// Free makes the device forget the memory; a second Free returns an error
// wrapping ErrFreed, and a copy already enqueued that runs after the Free
// fails the device.
func (h *Host) Free() error {
	if err := h.d.check("free host"); err != nil {
		return err
	}
	if h.freed.Swap(true) {
		return h.d.errorf("free host", ErrFreed)
	}
	h.d.unpin(h)
	return nil
}

func (h *Host) addr() uintptr { return addr(h.b) }
