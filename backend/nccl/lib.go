//go:build cuda && cgo

package nccl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "goccl_nccl.h"

// The loaded library: one per process, filled by goccl_nccl_open.
static struct {
	void *h;
	goccl_ncclGetVersion_t getVersion;
	goccl_ncclGetErrorString_t errorString;
	goccl_ncclGetUniqueId_t getUniqueId;
	goccl_ncclCommInitRank_t initRank;
	goccl_ncclCommSplit_t split; // NULL before NCCL 2.18
	goccl_ncclCommAbort_t abort_;
	goccl_ncclCommDestroy_t destroy;
	goccl_ncclCommGetAsyncError_t asyncError;
	goccl_ncclAllReduce_t allReduce;
	goccl_ncclBroadcast_t broadcast;
	goccl_ncclReduce_t reduce;
	goccl_ncclAllGather_t allGather;
	goccl_ncclReduceScatter_t reduceScatter;
	goccl_ncclSend_t send;
	goccl_ncclRecv_t recv;
	goccl_ncclGroup_t groupStart, groupEnd;
	int (*cuCtxSetCurrent)(void *);
} L;

// goccl_nccl_open opens path and finds every entry point goccl calls; on
// failure it writes why into err (n bytes) and returns -1.
static int goccl_nccl_open(const char *path, char *err, int n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		strncpy(err, e ? e : "dlopen failed", n - 1);
		return -1;
	}
#define SYM(field, name, required) \
	do { \
		*(void **)&L.field = dlsym(h, name); \
		if (!L.field && required) { \
			strncpy(err, "symbol " name " not found", n - 1); \
			dlclose(h); \
			memset(&L, 0, sizeof L); \
			return -1; \
		} \
	} while (0)
	SYM(getVersion, "ncclGetVersion", 1);
	SYM(errorString, "ncclGetErrorString", 0);
	SYM(getUniqueId, "ncclGetUniqueId", 1);
	SYM(initRank, "ncclCommInitRank", 1);
	SYM(split, "ncclCommSplit", 0);
	SYM(abort_, "ncclCommAbort", 1);
	SYM(destroy, "ncclCommDestroy", 1);
	SYM(asyncError, "ncclCommGetAsyncError", 1);
	SYM(allReduce, "ncclAllReduce", 1);
	SYM(broadcast, "ncclBroadcast", 1);
	SYM(reduce, "ncclReduce", 1);
	SYM(allGather, "ncclAllGather", 1);
	SYM(reduceScatter, "ncclReduceScatter", 1);
	SYM(send, "ncclSend", 1);
	SYM(recv, "ncclRecv", 1);
	SYM(groupStart, "ncclGroupStart", 1);
	SYM(groupEnd, "ncclGroupEnd", 1);
#undef SYM
	// The driver, where the process has loaded it (device/cuda has): NCCL
	// runs on the calling thread's current context.
	*(void **)&L.cuCtxSetCurrent = dlsym(RTLD_DEFAULT, "cuCtxSetCurrent");
	L.h = h;
	return 0;
}

static int goccl_nccl_has_split(void) { return L.split != NULL; }

static void goccl_setctx(uintptr_t ctx) {
	if (ctx && L.cuCtxSetCurrent) L.cuCtxSetCurrent((void *)ctx);
}

static int goccl_nccl_version(int *v) { return L.getVersion(v); }
static const char *goccl_nccl_errstr(int rc) { return L.errorString ? L.errorString((ncclResult_t)rc) : "(no ncclGetErrorString)"; }
static int goccl_nccl_unique_id(void *id) { return L.getUniqueId((ncclUniqueId *)id); }
static int goccl_nccl_init_rank(uintptr_t ctx, uintptr_t *c, int n, void *id, int rank) {
	goccl_setctx(ctx);
	ncclUniqueId u;
	memcpy(&u, id, sizeof u);
	ncclComm_t nc = NULL;
	int rc = L.initRank(&nc, n, u, rank);
	*c = (uintptr_t)nc;
	return rc;
}
static int goccl_nccl_split(uintptr_t ctx, uintptr_t c, int color, int key, uintptr_t *out) {
	goccl_setctx(ctx);
	ncclComm_t nc = NULL;
	int rc = L.split((ncclComm_t)c, color < 0 ? GOCCL_NCCL_SPLIT_NOCOLOR : color, key, &nc, NULL);
	*out = (uintptr_t)nc;
	return rc;
}
static int goccl_nccl_abort(uintptr_t c) { return L.abort_((ncclComm_t)c); }
static int goccl_nccl_destroy(uintptr_t c) { return L.destroy((ncclComm_t)c); }
static int goccl_nccl_async_error(uintptr_t c, int *e) {
	ncclResult_t r = ncclSuccess;
	int rc = L.asyncError((ncclComm_t)c, &r);
	*e = (int)r;
	return rc;
}

// One call, as nccl.go issues it: the collective's arguments in one
// struct (cgo passes it by pointer, no Go pointer inside).
typedef struct {
	int coll; // backend.Coll
	int dt, op, root;
	uintptr_t send, recv;
	size_t count;
} goccl_nccl_call;

enum { C_ALLREDUCE = 1, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER, C_SEND = 9, C_RECV = 10 };

// goccl_nccl_issue enqueues calls[0..n) on stream s, inside one
// ncclGroupStart/End when n > 1 (all-to-all, gather and scatter are
// grouped sends and receives); *failed is the index of the call that
// failed.
static int goccl_nccl_issue(uintptr_t ctx, uintptr_t comm, uintptr_t stream, goccl_nccl_call *calls, int n, int *failed) {
	goccl_setctx(ctx);
	ncclComm_t c = (ncclComm_t)comm;
	cudaStream_t s = (cudaStream_t)stream;
	int rc = 0;
	*failed = -1;
	if (n > 1 && (rc = L.groupStart()) != 0) return rc;
	for (int i = 0; i < n && rc == 0; i++) {
		goccl_nccl_call *k = &calls[i];
		void *send = (void *)k->send, *recv = (void *)k->recv;
		switch (k->coll) {
		case C_ALLREDUCE: rc = L.allReduce(send, recv, k->count, k->dt, k->op, c, s); break;
		case C_BROADCAST: rc = L.broadcast(send, recv, k->count, k->dt, k->root, c, s); break;
		case C_REDUCE: rc = L.reduce(send, recv, k->count, k->dt, k->op, k->root, c, s); break;
		case C_ALLGATHER: rc = L.allGather(send, recv, k->count, k->dt, c, s); break;
		case C_REDUCESCATTER: rc = L.reduceScatter(send, recv, k->count, k->dt, k->op, c, s); break;
		case C_SEND: rc = L.send(send, k->count, k->dt, k->root, c, s); break;
		case C_RECV: rc = L.recv(recv, k->count, k->dt, k->root, c, s); break;
		default: rc = ncclInvalidArgument;
		}
		if (rc != 0) *failed = i;
	}
	if (n > 1) {
		int rc2 = L.groupEnd();
		if (rc == 0) rc = rc2;
	}
	return rc;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// EnvLib names the NCCL library to open instead of libnccl.so.2 (a path,
// or a name the dynamic loader finds).
const EnvLib = "GOCCL_NCCL_LIB"

// DefaultLib is the library opened when EnvLib is not set.
const DefaultLib = "libnccl.so.2"

// IDBytes is the size of NCCL's unique id.
const IDBytes = C.GOCCL_NCCL_ID_BYTES

// Lib is the loaded NCCL library.
type Lib struct {
	Path    string
	Version int  // NCCL's version code (22203 for 2.22.3)
	Split   bool // ncclCommSplit is present (NCCL 2.18 and later)
}

// Avg reports whether the library has ncclAvg (NCCL 2.10 and later).
func (l *Lib) Avg() bool { return l.Version >= 21000 }

// String is the library and its version, for logs.
func (l *Lib) String() string {
	v := l.Version
	major, minor, patch := v/10000, v/100%100, v%100
	if v < 10000 { // before 2.9: major*1000 + minor*100 + patch
		major, minor, patch = v/1000, v/100%10, v%100
	}
	return fmt.Sprintf("NCCL %d.%d.%d (%s)", major, minor, patch, l.Path)
}

var (
	loadOnce sync.Once
	theLib   *Lib
	loadErr  error
)

// ErrNoLibrary is wrapped by Load's error when the library cannot be
// opened or lacks an entry point goccl calls.
var ErrNoLibrary = errors.New("nccl: library not loaded")

// Load opens the NCCL library once per process: GOCCL_NCCL_LIB, else
// libnccl.so.2.
func Load() (*Lib, error) {
	loadOnce.Do(func() {
		path := os.Getenv(EnvLib)
		if path == "" {
			path = DefaultLib
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		var buf [512]C.char
		if C.goccl_nccl_open(cpath, &buf[0], C.int(len(buf))) != 0 {
			loadErr = fmt.Errorf("%w: %s: %s (set %s to its path)", ErrNoLibrary, path, C.GoString(&buf[0]), EnvLib)
			return
		}
		var v C.int
		if rc := C.goccl_nccl_version(&v); rc != 0 {
			loadErr = fmt.Errorf("%w: %s: ncclGetVersion: %w", ErrNoLibrary, path, ncclErr(rc))
			return
		}
		theLib = &Lib{Path: path, Version: int(v), Split: C.goccl_nccl_has_split() != 0}
	})
	return theLib, loadErr
}

// Error is an NCCL result other than ncclSuccess.
type Error struct {
	Code int
	What string
}

func (e *Error) Error() string {
	return fmt.Sprintf("nccl: %s: %s (ncclResult_t %d)", e.What, C.GoString(C.goccl_nccl_errstr(C.int(e.Code))), e.Code)
}

func ncclErr(rc C.int) error { return &Error{Code: int(rc), What: "ncclGetVersion"} }

func callErr(what string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return &Error{Code: int(rc), What: what}
}

// NCCL's dtypes and ops (goccl_nccl.h), for nccl.go.
const (
	tInt8     = C.ncclInt8
	tUint8    = C.ncclUint8
	tInt32    = C.ncclInt32
	tUint32   = C.ncclUint32
	tInt64    = C.ncclInt64
	tUint64   = C.ncclUint64
	tFloat16  = C.ncclFloat16
	tFloat32  = C.ncclFloat32
	tFloat64  = C.ncclFloat64
	tBfloat16 = C.ncclBfloat16

	opSum  = C.ncclSum
	opProd = C.ncclProd
	opMax  = C.ncclMax
	opMin  = C.ncclMin
	opAvg  = C.ncclAvg

	resultInProgress = C.ncclInProgress
)

// handle is an NCCL communicator (ncclComm_t), 0 for none.
type commHandle uintptr

func uniqueID(id []byte) error {
	var u C.ncclUniqueId
	if rc := C.goccl_nccl_unique_id(unsafe.Pointer(&u)); rc != 0 {
		return callErr("ncclGetUniqueId", rc)
	}
	copy(id, C.GoBytes(unsafe.Pointer(&u), C.int(IDBytes)))
	return nil
}

func initRank(cuctx uintptr, n int, id []byte, rank int) (commHandle, error) {
	cid := C.CBytes(id)
	defer C.free(cid)
	var nc C.uintptr_t
	rc := C.goccl_nccl_init_rank(C.uintptr_t(cuctx), &nc, C.int(n), cid, C.int(rank))
	return commHandle(nc), callErr("ncclCommInitRank", rc)
}

func splitComm(cuctx uintptr, c commHandle, color, key int) (commHandle, error) {
	var nc C.uintptr_t
	rc := C.goccl_nccl_split(C.uintptr_t(cuctx), C.uintptr_t(c), C.int(color), C.int(key), &nc)
	return commHandle(nc), callErr("ncclCommSplit", rc)
}

func abortComm(c commHandle) error {
	return callErr("ncclCommAbort", C.goccl_nccl_abort(C.uintptr_t(c)))
}

func destroyComm(c commHandle) error {
	return callErr("ncclCommDestroy", C.goccl_nccl_destroy(C.uintptr_t(c)))
}

// asyncError returns the communicator's asynchronous result.
func asyncError(c commHandle) (int, error) {
	var e C.int
	rc := C.goccl_nccl_async_error(C.uintptr_t(c), &e)
	return int(e), callErr("ncclCommGetAsyncError", rc)
}

// op is one NCCL call of a goccl call: device addresses and counts in
// elements of dt.
type op struct {
	coll         int // backend.Coll: AllReduce..ReduceScatter, Send, Recv
	dt, op, root int
	send, recv   uintptr
	count        int
}

// issue enqueues ops on stream, grouped when there are more than one; it
// returns the index of the op that failed, with the error.
func issue(cuctx uintptr, c commHandle, stream uintptr, ops []op) (int, error) {
	if len(ops) == 0 {
		return -1, nil
	}
	sz := C.size_t(unsafe.Sizeof(C.goccl_nccl_call{}))
	p := C.malloc(sz * C.size_t(len(ops)))
	defer C.free(p)
	calls := unsafe.Slice((*C.goccl_nccl_call)(p), len(ops))
	for i, o := range ops {
		calls[i] = C.goccl_nccl_call{coll: C.int(o.coll), dt: C.int(o.dt), op: C.int(o.op), root: C.int(o.root),
			send: C.uintptr_t(o.send), recv: C.uintptr_t(o.recv), count: C.size_t(o.count)}
	}
	var failed C.int
	rc := C.goccl_nccl_issue(C.uintptr_t(cuctx), C.uintptr_t(c), C.uintptr_t(stream), &calls[0], C.int(len(ops)), &failed)
	return int(failed), callErr("issue", rc)
}
