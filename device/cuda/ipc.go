//go:build cuda

package cuda

/*
#include <string.h>
#include <cuda.h>

static CUresult goccl_ipc_get(CUdeviceptr p, void *out) {
	CUipcMemHandle h;
	CUresult r = cuIpcGetMemHandle(&h, p);
	if (r == CUDA_SUCCESS) memcpy(out, h.reserved, CU_IPC_HANDLE_SIZE);
	return r;
}

static CUresult goccl_ipc_open(CUdeviceptr *p, const void *in) {
	CUipcMemHandle h;
	memcpy(h.reserved, in, CU_IPC_HANDLE_SIZE);
	return cuIpcOpenMemHandle(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}

static CUresult goccl_ipc_close(CUdeviceptr p) { return cuIpcCloseMemHandle(p); }
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

var _ device.IPC = (*Context)(nil)

// ipcWireLen is the length of an IPCHandle as IPCExport writes it: the
// memory handle, the offset, the dtype and the length.
const ipcWireLen = 64 + 8 + 1 + 8

// IPCExport returns b's IPCHandle as bytes, for device.IPC: goccl's
// device data path sends it to a rank on the same host, which copies
// device to device from it.
func (c *Context) IPCExport(b device.Buffer) ([]byte, error) {
	cb, err := c.buffer("ipc export", "buffer", b)
	if err != nil {
		return nil, err
	}
	h, err := cb.IPCHandle()
	if err != nil {
		return nil, err
	}
	w := make([]byte, 0, ipcWireLen)
	w = append(w, h.Mem[:]...)
	w = binary.LittleEndian.AppendUint64(w, uint64(h.Offset))
	w = append(w, byte(h.DType))
	return binary.LittleEndian.AppendUint64(w, uint64(h.Len)), nil
}

// IPCImport opens a handle from IPCExport in another process, for
// device.IPC. A process cannot open its own handles (CUDA refuses), so
// ranks that are goroutines of one process stage instead.
func (c *Context) IPCImport(handle []byte) (device.Buffer, error) {
	if len(handle) != ipcWireLen {
		return nil, invalid("ipc import", "handle of %d bytes, want %d", len(handle), ipcWireLen)
	}
	var h IPCHandle
	copy(h.Mem[:], handle)
	le := binary.LittleEndian
	off, n := le.Uint64(handle[64:]), le.Uint64(handle[73:])
	if off > 1<<62 || n > 1<<62 {
		return nil, invalid("ipc import", "handle with offset %d and length %d", off, n)
	}
	h.Offset, h.DType, h.Len = int(off), reduceop.DType(handle[72]), int(n)
	b, err := c.OpenIPC(h)
	if err != nil {
		return nil, err // not a nil *Buffer in a non-nil interface
	}
	return b, nil
}

// IPCHandle names a Buffer's memory for another process on the same machine
// (CUDA IPC): the allocation's cuIpcGetMemHandle, where the Buffer starts
// in it, and its dtype and length. It is plain data, to be sent over any
// channel.
type IPCHandle struct {
	Mem    [64]byte // CUipcMemHandle of the allocation holding the buffer
	Offset int      // bytes from the allocation's start to element 0
	DType  reduceop.DType
	Len    int
}

// IPCHandle returns the handle another process passes to OpenIPC to use
// b's memory (cuIpcGetMemHandle). The memory must come from cuMemAlloc
// (Alloc, or a framework's caching allocator); memory from the virtual
// memory management API or from memory pools has no such handle.
func (b *Buffer) IPCHandle() (IPCHandle, error) {
	const op = "ipc handle"
	if _, err := b.c.buffer(op, "buffer", b); err != nil {
		return IPCHandle{}, err
	}
	h := IPCHandle{DType: b.dt, Len: b.n}
	if b.n == 0 {
		return h, nil
	}
	err := b.c.do(op, func() error {
		info, err := b.c.pointerInfo(uintptr(b.ptr))
		if err != nil {
			return err
		}
		start := info.start
		h.Offset = int(uintptr(b.ptr) - start)
		if r := C.goccl_ipc_get(C.CUdeviceptr(start), unsafe.Pointer(&h.Mem[0])); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuIpcGetMemHandle(%#x): CUresult %d", start, int(r))
		}
		return nil
	})
	if err != nil {
		return IPCHandle{}, err
	}
	return h, nil
}

// OpenIPC maps the memory another process named with IPCHandle and returns
// a Buffer over it (cuIpcOpenMemHandle, peer access enabled as needed); Free
// unmaps it (cuIpcCloseMemHandle), and the exporter's memory must outlive
// it. A process cannot open its own handles.
func (c *Context) OpenIPC(h IPCHandle) (*Buffer, error) {
	const op = "open ipc"
	if !h.DType.Valid() || h.Len < 0 || h.Offset < 0 || h.Offset%h.DType.Size() != 0 {
		return nil, invalid(op, "handle of %d x %v at offset %d", h.Len, h.DType, h.Offset)
	}
	b := &Buffer{c: c, dt: h.DType, n: h.Len}
	if h.Len == 0 {
		return b, nil
	}
	err := c.do(op, func() error {
		var base C.CUdeviceptr
		if r := C.goccl_ipc_open(&base, unsafe.Pointer(&h.Mem[0])); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuIpcOpenMemHandle: CUresult %d", int(r))
		}
		b.base = cu.DevicePtr(base)
		b.ptr = b.base + cu.DevicePtr(h.Offset)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// closeIPC unmaps memory from OpenIPC. Call inside do.
func closeIPC(base cu.DevicePtr) error {
	if r := C.goccl_ipc_close(C.CUdeviceptr(base)); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuIpcCloseMemHandle(%#x): CUresult %d", uintptr(base), int(r))
	}
	return nil
}
