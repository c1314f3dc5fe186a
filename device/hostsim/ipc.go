package hostsim

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// IPC: a hostsim Device implements device.IPC within one process, which is
// where its memory lives: IPCExport registers the allocation a Buffer lies
// in under a number, and IPCImport, on any hostsim Device of the same
// process, returns a Buffer of the importing device over that memory, as
// cuIpcOpenMemHandle maps another process's allocation. A handle from
// another process is refused (ErrIPC), so ranks that are processes fall
// back to staged copies, as CUDA ranks do where IPC is refused; NoIPC
// makes a device refuse to export and import, to test that fallback within
// one process.

// ErrIPC is wrapped by IPCExport and IPCImport's refusals.
var ErrIPC = errors.New("hostsim: IPC refused")

// NoIPC is an Option: the device refuses IPC (IPCExport and IPCImport
// fail with ErrIPC).
var NoIPC Option = noIPC{}

type noIPC struct{}

func (noIPC) apply(d *Device) { d.noIPC = true }

var (
	exported sync.Map // allocation number -> *alloc, until its Buffer is freed
	lastID   atomic.Uint64
)

var _ device.IPC = (*Device)(nil)

// handle layout: "hsim", pid, allocation number, byte offset, dtype, length.
const handleLen = 4 + 8 + 8 + 8 + 1 + 8

// IPCExport returns a handle naming the memory of b, a Buffer of d.
func (d *Device) IPCExport(b device.Buffer) ([]byte, error) {
	const op = "ipc export"
	if err := d.check(op); err != nil {
		return nil, err
	}
	if d.noIPC {
		return nil, d.errorf(op, ErrIPC)
	}
	hb, ok := b.(*Buffer)
	if !ok || hb == nil || hb.a.d != d {
		return nil, d.errorf(op, "buffer %T of another device: %w", b, ErrForeign)
	}
	if hb.gone() {
		return nil, d.errorf(op, ErrFreed)
	}
	a := hb.a
	id := a.ipcID.Load()
	if id == 0 {
		id = lastID.Add(1)
		if !a.ipcID.CompareAndSwap(0, id) {
			id = a.ipcID.Load()
		} else {
			exported.Store(id, a)
		}
	}
	off := 0
	if len(hb.mem) > 0 {
		off = int(uintptr(unsafe.Pointer(&hb.mem[0])) - uintptr(unsafe.Pointer(unsafe.SliceData(a.mem))))
	}
	h := make([]byte, 0, handleLen)
	h = append(h, "hsim"...)
	h = binary.LittleEndian.AppendUint64(h, uint64(os.Getpid()))
	h = binary.LittleEndian.AppendUint64(h, id)
	h = binary.LittleEndian.AppendUint64(h, uint64(off))
	h = append(h, byte(hb.dt))
	h = binary.LittleEndian.AppendUint64(h, uint64(hb.n))
	return h, nil
}

// IPCImport returns a Buffer of d over the memory a handle from IPCExport
// names. Its Free does nothing to the memory.
func (d *Device) IPCImport(handle []byte) (device.Buffer, error) {
	const op = "ipc import"
	if err := d.check(op); err != nil {
		return nil, err
	}
	if d.noIPC {
		return nil, d.errorf(op, ErrIPC)
	}
	if len(handle) != handleLen || string(handle[:4]) != "hsim" {
		return nil, d.errorf(op, "not a hostsim handle (%d bytes): %w", len(handle), ErrIPC)
	}
	le := binary.LittleEndian
	pid, id, off := le.Uint64(handle[4:]), le.Uint64(handle[12:]), le.Uint64(handle[20:])
	dt, n := reduceop.DType(handle[28]), le.Uint64(handle[29:])
	if pid != uint64(os.Getpid()) {
		return nil, d.errorf(op, "memory of process %d: hostsim memory is shared within one process only: %w", pid, ErrIPC)
	}
	v, ok := exported.Load(id)
	if !ok {
		return nil, d.errorf(op, "allocation %d was freed or never exported: %w", id, ErrIPC)
	}
	a := v.(*alloc)
	if !dt.Valid() || n > uint64(len(a.mem)) || off > uint64(len(a.mem)) || n*uint64(dt.Size()) > uint64(len(a.mem))-off {
		return nil, d.errorf(op, "handle of %d x %v at byte %d outside an allocation of %d bytes: %w", n, dt, off, len(a.mem), ErrRange)
	}
	mem := a.mem[off : off+n*uint64(dt.Size()) : off+n*uint64(dt.Size())]
	return &Buffer{a: &alloc{d: d, mem: mem}, dt: dt, n: int(n), mem: mem}, nil
}
