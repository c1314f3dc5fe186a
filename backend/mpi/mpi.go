//go:build mpi

package mpi

/*
#cgo !mpich pkg-config: ompi-c
#cgo mpich pkg-config: mpich
// The defines differ only so that the two builds differ in what the go
// command hashes: its build cache keys a cgo package on its files and
// #cgo flags but not on the pkg-config names (Go issue 73033), so after
// -tags mpi,mpich a -tags mpi build would reuse the MPICH object and link
// libmpich under Open MPI's mpirun.
#cgo !mpich CFLAGS: -DGOCCL_MPI_OPENMPI
#cgo mpich CFLAGS: -DGOCCL_MPI_MPICH
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

// goccl's dtypes (reduceop.DType), one to one; MPI_DATATYPE_NULL for
// those MPI has no standard name for (float16, bfloat16).
static MPI_Datatype goccl_dt(int d) {
	switch (d) {
	case 1: return MPI_FLOAT;
	case 2: return MPI_DOUBLE;
	case 5: return MPI_INT8_T;
	case 6: return MPI_UINT8_T;
	case 7: return MPI_INT32_T;
	case 8: return MPI_INT64_T;
	case 9: return MPI_UINT16_T;
	case 10: return MPI_UINT32_T;
	case 11: return MPI_UINT64_T;
	case 12: return MPI_INT16_T;
	case 13: return MPI_C_BOOL;
	case 14: return MPI_C_FLOAT_COMPLEX;
	case 15: return MPI_C_DOUBLE_COMPLEX;
	}
	return MPI_DATATYPE_NULL;
}

// goccl's ops (reduceop.Op; Avg arrives as Sum); on bool the logical ones.
static MPI_Op goccl_op(int op, int isbool) {
	if (isbool) {
		switch (op) {
		case 3: case 6: return MPI_LAND;
		case 4: case 7: return MPI_LOR;
		case 8: return MPI_LXOR;
		}
		return MPI_OP_NULL;
	}
	switch (op) {
	case 1: case 5: return MPI_SUM;
	case 2: return MPI_PROD;
	case 3: return MPI_MIN;
	case 4: return MPI_MAX;
	case 6: return MPI_BAND;
	case 7: return MPI_BOR;
	case 8: return MPI_BXOR;
	}
	return MPI_OP_NULL;
}

static char goccl_dummy_buf[16];
static void *goccl_dummy(void) { return goccl_dummy_buf; }

static int goccl_init(int want, int *provided, int *rank, int *size, int *tagub) {
	int inited = 0, rc;
	MPI_Initialized(&inited);
	if (inited) {
		rc = MPI_Query_thread(provided);
	} else {
		rc = MPI_Init_thread(NULL, NULL, want, provided);
	}
	if (rc != MPI_SUCCESS) return rc;
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, size);
	int *ub, flag = 0;
	*tagub = 32767;
	if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag) == MPI_SUCCESS && flag) *tagub = *ub;
	return MPI_SUCCESS;
}

static MPI_Comm goccl_world(void) { return MPI_COMM_WORLD; }
static int goccl_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }
static int goccl_thread_serialized(void) { return MPI_THREAD_SERIALIZED; }

static void goccl_errstr(int rc, char *buf, int n) {
	int len = 0;
	if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) len = 0;
	buf[len < n ? len : n - 1] = 0;
}

// goccl_test tests r up to tries times, until it completes: one call from
// Go for many tests, since a test of a small call in progress costs less
// than the crossing into C.
static int goccl_test(MPI_Request *r, int tries, int *flag, int *bytes) {
	MPI_Status st;
	int rc = MPI_SUCCESS;
	*flag = 0;
	for (int i = 0; i < tries && rc == MPI_SUCCESS && !*flag; i++) rc = MPI_Test(r, flag, &st);
	if (rc == MPI_SUCCESS && *flag && bytes) MPI_Get_count(&st, MPI_BYTE, bytes);
	return rc;
}

static void *goccl_inplace(void *p, int inplace) { return inplace ? MPI_IN_PLACE : p; }
// The collectives' wrappers start the nonblocking call on r, or with blk
// make the blocking one (comm.Block).

static int goccl_allreduce(void *buf, int n, int dt, int op, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Allreduce(MPI_IN_PLACE, buf, n, goccl_dt(dt), goccl_op(op, dt == 13), c);
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, goccl_dt(dt), goccl_op(op, dt == 13), c, r);
}
static int goccl_bcast(void *buf, int n, int dt, int root, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Bcast(buf, n, goccl_dt(dt), root, c);
	return MPI_Ibcast(buf, n, goccl_dt(dt), root, c, r);
}
static int goccl_reduce(void *buf, int n, int dt, int op, int root, int isroot, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) {
#ifdef GOCCL_MPI_MPICH
		// MPICH 4.0.2's MPI_Reduce with MPI_IN_PLACE at a root other than
		// 0 faults from about 2 KiB (its nonblocking one does not): the
		// root reduces from a copy instead.
		if (isroot && root != 0) {
			int sz = 0;
			MPI_Type_size(goccl_dt(dt), &sz);
			void *tmp = malloc((size_t)n * sz + 1);
			if (!tmp) return MPI_ERR_NO_MEM;
			memcpy(tmp, buf, (size_t)n * sz);
			int rc = MPI_Reduce(tmp, buf, n, goccl_dt(dt), goccl_op(op, dt == 13), root, c);
			free(tmp);
			return rc;
		}
#endif
		return MPI_Reduce(isroot ? MPI_IN_PLACE : buf, isroot ? buf : NULL, n, goccl_dt(dt), goccl_op(op, dt == 13), root, c);
	}
	return MPI_Ireduce(isroot ? MPI_IN_PLACE : buf, isroot ? buf : NULL, n, goccl_dt(dt), goccl_op(op, dt == 13), root, c, r);
}
static int goccl_allgather(void *s, int inplace, void *rbuf, int n, int dt, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Allgather(goccl_inplace(s, inplace), n, goccl_dt(dt), rbuf, n, goccl_dt(dt), c);
	return MPI_Iallgather(goccl_inplace(s, inplace), n, goccl_dt(dt), rbuf, n, goccl_dt(dt), c, r);
}
static int goccl_allgatherv(void *s, int inplace, int n, void *rbuf, int *counts, int *displs, int dt, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Allgatherv(goccl_inplace(s, inplace), n, goccl_dt(dt), rbuf, counts, displs, goccl_dt(dt), c);
	return MPI_Iallgatherv(goccl_inplace(s, inplace), n, goccl_dt(dt), rbuf, counts, displs, goccl_dt(dt), c, r);
}
static int goccl_reduce_scatter_block(void *s, void *rbuf, int n, int dt, int op, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Reduce_scatter_block(s, rbuf, n, goccl_dt(dt), goccl_op(op, dt == 13), c);
	return MPI_Ireduce_scatter_block(s, rbuf, n, goccl_dt(dt), goccl_op(op, dt == 13), c, r);
}
static int goccl_reduce_scatter(void *s, void *rbuf, int *counts, int dt, int op, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Reduce_scatter(s, rbuf, counts, goccl_dt(dt), goccl_op(op, dt == 13), c);
	return MPI_Ireduce_scatter(s, rbuf, counts, goccl_dt(dt), goccl_op(op, dt == 13), c, r);
}
static int goccl_alltoall(void *s, void *rbuf, int n, int dt, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Alltoall(s, n, goccl_dt(dt), rbuf, n, goccl_dt(dt), c);
	return MPI_Ialltoall(s, n, goccl_dt(dt), rbuf, n, goccl_dt(dt), c, r);
}
static int goccl_alltoallv(void *s, int *sc, int *sd, void *rbuf, int *rc, int *rd, int dt, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Alltoallv(s, sc, sd, goccl_dt(dt), rbuf, rc, rd, goccl_dt(dt), c);
	return MPI_Ialltoallv(s, sc, sd, goccl_dt(dt), rbuf, rc, rd, goccl_dt(dt), c, r);
}
static int goccl_gather(void *s, int inplace, void *rbuf, int n, int dt, int root, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Gather(goccl_inplace(s, inplace), n, goccl_dt(dt), rbuf, n, goccl_dt(dt), root, c);
	return MPI_Igather(goccl_inplace(s, inplace), n, goccl_dt(dt), rbuf, n, goccl_dt(dt), root, c, r);
}
static int goccl_scatter(void *s, void *rbuf, int inplace, int n, int dt, int root, MPI_Comm c, MPI_Request *r, int blk) {
	if (blk) return MPI_Scatter(s, n, goccl_dt(dt), goccl_inplace(rbuf, inplace), n, goccl_dt(dt), root, c);
	return MPI_Iscatter(s, n, goccl_dt(dt), goccl_inplace(rbuf, inplace), n, goccl_dt(dt), root, c, r);
}
static int goccl_send(void *buf, int n, int peer, int tag, MPI_Comm c, MPI_Request *r) {
	return MPI_Isend(buf, n, MPI_BYTE, peer, tag, c, r);
}
static int goccl_recv(void *buf, int n, int peer, int tag, MPI_Comm c, MPI_Request *r) {
	return MPI_Irecv(buf, n, MPI_BYTE, peer, tag, c, r);
}
static int goccl_barrier(MPI_Comm c, MPI_Request *r, int blk) { return blk ? MPI_Barrier(c) : MPI_Ibarrier(c, r); }
static int goccl_split(MPI_Comm c, int color, int key, MPI_Comm *out, int *isnull) {
	int rc = MPI_Comm_split(c, color < 0 ? MPI_UNDEFINED : color, key, out);
	*isnull = rc == MPI_SUCCESS && *out == MPI_COMM_NULL;
	if (rc == MPI_SUCCESS && !*isnull) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
	return rc;
}
static int goccl_reduce_local(void *in, void *inout, int n, int dt, int op) {
	return MPI_Reduce_local(in, inout, n, goccl_dt(dt), goccl_op(op, dt == 13));
}
static void goccl_library(char *buf, int n) {
	char v[MPI_MAX_LIBRARY_VERSION_STRING];
	int len = 0;
	if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) len = 0;
	if (len >= n) len = n - 1;
	memcpy(buf, v, len);
	buf[len] = 0;
}
static int goccl_free(MPI_Comm *c) { return MPI_Comm_free(c); }
static int goccl_finalize(void) { return MPI_Finalize(); }
static int goccl_abort(int code) { return MPI_Abort(MPI_COMM_WORLD, code); }
*/
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/reduceop"
)

// EnvThread: "serialized" makes every MPI call run on the one locked
// thread even where MPI_THREAD_MULTIPLE is granted (tests, and MPIs whose
// MULTIPLE is slow).
const EnvThread = "GOCCL_MPI_THREAD"

// EnvWait says how a collective waits for MPI: "block" (the default)
// makes the blocking call (MPI_Allreduce), "poll" starts the nonblocking
// one (MPI_Iallreduce) and tests it until it completes. The blocking
// calls are the faster ones (Open MPI runs other algorithms for them: its
// tuned module against libnbc, 3x at 8 bytes and 2x at 1 MiB on one host,
// BENCHMARKS.md; MPICH's were not timed); under them the deadline ends the job (a watchdog
// names the rank behind, reports it and calls MPI_Abort), where under
// "poll" the call returns the error first and Close ends the job.
// Send and Recv are always nonblocking: posted in order when made.
const EnvWait = "GOCCL_MPI_WAIT"

func init() { backend.Register(backend.MPI, open) }

// lib is MPI, initialized once per process: the goroutine locked to the
// thread that called MPI_Init_thread, which runs every MPI call unless
// MPI_THREAD_MULTIPLE was granted.
type lib struct {
	multiple    bool
	reqs        chan func()
	rank, size  int
	tagUB       int
	initErr     error
	finalized   bool
	provided    int
	requestedMT bool
	library     string
	poll        bool         // GOCCL_MPI_WAIT=poll: no blocking collectives
	waitErr     error        // GOCCL_MPI_WAIT holds something else
	blocking    atomic.Int32 // blocking calls in the library now
	// wrong[dt] has bit op set where this MPI's reduction of dt by op
	// disagreed with goccl's host kernel at init (probeOps): such calls
	// run on goccl's own path.
	wrong [16]uint16

	// inflight holds every started request until it completes. A
	// request whose wait gave up (a deadline, an abort) stays in MPI,
	// which may still read and write its buffers, and stays here until
	// the job ends: dropped, the collector would find its Pinner still
	// pinning and end the process ("found leaking pinned pointer"), and
	// could free what MPI writes into.
	inflightMu sync.Mutex
	inflight   map[*request]struct{}
}

var (
	once   sync.Once
	theLib *lib
)

func start() *lib {
	once.Do(func() {
		l := &lib{reqs: make(chan func()), inflight: make(map[*request]struct{})}
		switch w := os.Getenv(EnvWait); w {
		case "", "block":
		case "poll":
			l.poll = true
		default:
			l.waitErr = fmt.Errorf("mpi: %s=%q: want block or poll", EnvWait, w)
		}
		if _, ok := os.LookupEnv("OMPI_MCA_opal_signal"); !ok {
			// Open MPI's handlers of SIGSEGV, SIGBUS, ... would take over
			// the Go runtime's (a nil dereference would end the process
			// instead of panicking). MPICH needs nothing alike: the
			// suite's TestMPISignals checks both.
			os.Setenv("OMPI_MCA_opal_signal", "")
		}
		want := C.goccl_thread_multiple()
		l.requestedMT = os.Getenv(EnvThread) != "serialized"
		if !l.requestedMT {
			want = C.goccl_thread_serialized()
		}
		ready := make(chan struct{})
		go func() {
			runtime.LockOSThread() // for good: MPI_Finalize runs here too
			var prov, rank, size, ub C.int
			if rc := C.goccl_init(want, &prov, &rank, &size, &ub); rc != 0 {
				l.initErr = mpiErr("MPI_Init_thread", rc)
			}
			l.provided, l.rank, l.size, l.tagUB = int(prov), int(rank), int(size), int(ub)
			l.multiple = l.requestedMT && prov == C.goccl_thread_multiple()
			if l.initErr == nil {
				var v [256]C.char
				C.goccl_library(&v[0], C.int(len(v)))
				line, _, _ := strings.Cut(strings.TrimSpace(C.GoString(&v[0])), "\n")
				l.library = strings.Join(strings.Fields(line), " ")
				l.probeOps()
			}
			close(ready)
			for f := range l.reqs {
				f()
			}
		}()
		<-ready
		theLib = l
	})
	return theLib
}

// probeOps reduces, with MPI_Reduce_local (no message, so every rank
// finds the same), two elements of each integer dtype and of bool by each
// op that applies, and compares with goccl's host kernel. The integers
// are 0x01 and 0xff in every byte, so that a library that orders an
// unsigned type as a signed one is caught: Debian's MPICH 4.0.2 gets
// MPI_MIN and MPI_MAX wrong on every unsigned type. A pair found wrong
// runs on goccl's own path, whichever MPI and version: trying it costs
// microseconds once, and a fixed library takes the calls back by itself.
// It runs on the thread that initialized MPI.
func (l *lib) probeOps() {
	for _, dt := range reduceop.DTypes {
		if !dt.IsInteger() && dt != reduceop.Bool || int(dt) >= len(l.wrong) {
			continue
		}
		es := dt.Size()
		lo, hi := bytes.Repeat([]byte{1}, es), bytes.Repeat([]byte{0xff}, es)
		if dt == reduceop.Bool {
			lo, hi = []byte{0}, []byte{1}
		}
		for _, op := range reduceop.Ops {
			if op == reduceop.Avg || reduceop.Check(op, dt) != nil || op >= 16 {
				continue
			}
			in := append(append([]byte(nil), lo...), hi...)
			got := append(append([]byte(nil), hi...), lo...)
			want := append([]byte(nil), got...)
			if err := reduceop.Apply(dt, op, want, in); err != nil {
				continue // goccl's own path has no answer to compare with
			}
			rc := C.goccl_reduce_local(unsafe.Pointer(&in[0]), unsafe.Pointer(&got[0]), 2, C.int(dt), C.int(op))
			if rc != 0 || !bytes.Equal(got, want) {
				l.wrong[dt] |= 1 << op
			}
		}
	}
}

// Library is the first line of MPI_Get_library_version: which MPI the
// process runs on, for logs and tests.
func Library() string { return start().library }

// String is the library, for the log of which backend Init opened.
func (c *comm) String() string { return c.l.library }

// WrongReductions lists the dtype and op pairs ("uint8 max") that this
// MPI reduced wrong when it was initialized, and that therefore run on
// goccl's own path; none with a correct library.
func WrongReductions() []string {
	l := start()
	var out []string
	for _, dt := range reduceop.DTypes {
		for _, op := range reduceop.Ops {
			if int(dt) < len(l.wrong) && op < 16 && l.wrong[dt]&(1<<op) != 0 {
				out = append(out, dt.String()+" "+op.String())
			}
		}
	}
	return out
}

// do runs f where MPI allows: here with MPI_THREAD_MULTIPLE, else on the
// locked thread.
func (l *lib) do(f func()) {
	if l.multiple {
		f()
		return
	}
	l.serial(f)
}

// serial runs f on the locked thread.
func (l *lib) serial(f func()) {
	done := make(chan struct{})
	l.reqs <- func() { f(); close(done) }
	<-done
}

func mpiErr(what string, rc C.int) error {
	var buf [512]C.char
	C.goccl_errstr(rc, &buf[0], C.int(len(buf)))
	return fmt.Errorf("mpi: %s: %s (error %d)", what, C.GoString(&buf[0]), int(rc))
}

// Threading says which thread level MPI granted, for logs and tests.
func Threading() string {
	l := start()
	if l.multiple {
		return "multiple"
	}
	return fmt.Sprintf("serialized on one locked thread (provided level %d)", l.provided)
}

func open(rank, size int) (backend.Comm, error) {
	l := start()
	if l.initErr != nil {
		return nil, l.initErr
	}
	if l.waitErr != nil {
		return nil, l.waitErr
	}
	if l.rank != rank || l.size != size {
		return nil, fmt.Errorf("mpi: MPI sees rank %d of %d where goccl is rank %d of %d: start the job with mpirun (every rank with GOCCL_BACKEND=mpi)",
			l.rank, l.size, rank, size)
	}
	return &comm{l: l, c: C.goccl_world(), rank: rank, size: size, world: true}, nil
}

type comm struct {
	l          *lib
	c          C.MPI_Comm
	rank, size int
	world      bool
	blocked    request // Block's, reused
}

func (c *comm) Name() string { return string(backend.MPI) }

func (c *comm) Memory() backend.Memory { return backend.Host }

func (c *comm) Takes(k *backend.Call) bool {
	switch k.DType {
	case reduceop.Float16, reduceop.BFloat16:
		return false // no standard MPI type: goccl's own path
	}
	if (k.Coll == backend.Send || k.Coll == backend.Recv) && k.Tag > c.l.tagUB {
		// goccl's tags go to 2^31-1, MPI's to MPI_TAG_UB (MPICH's is
		// 2^28-1). Both ends decide alike, and one tag's messages all
		// take one path, so their order holds.
		return false
	}
	if int(k.DType) < len(c.l.wrong) && k.Op < 16 && c.l.wrong[k.DType]&(1<<k.Op) != 0 {
		return false // this MPI reduces it wrong (probeOps)
	}
	es := k.DType.Size()
	if es == 0 {
		return false
	}
	// Send and Recv count bytes (MPI_BYTE), the others elements; a Recv
	// must decide as its Send does, or the two take different paths.
	if len(k.Send)/es > math.MaxInt32 || len(k.Recv)/es > math.MaxInt32 ||
		len(k.Send) > math.MaxInt32 && k.Coll == backend.Send || len(k.Recv) > math.MaxInt32 && k.Coll == backend.Recv {
		return false
	}
	return true
}

// request is an MPI request and what it holds until it completes.
type request struct {
	c       *comm
	r       C.MPI_Request
	pin     runtime.Pinner
	cmem    []unsafe.Pointer
	want    int // a Recv's length: the message must have as many bytes
	done    bool
	started bool
	block   bool // made by Block: r.r is not used, and nothing is pinned
	held    bool // in c.l.inflight
}

// blk tells a collective's wrapper to make the blocking call. (&r.r goes
// to C either way, as an address of a field: cgo then checks only the
// field, where another pointer to r would have it check all of r.)
func (r *request) blk() C.int {
	if r.block {
		return 1
	}
	return 0
}

func (r *request) Test() (bool, error) {
	if r.done || !r.started {
		return true, nil
	}
	var flag, bytes, rc C.int
	if r.c.l.multiple { // called directly: do's closure would be allocated on every test
		rc = C.goccl_test(&r.r, testTries, &flag, &bytes)
	} else {
		r.c.l.serial(func() { rc = C.goccl_test(&r.r, testTries, &flag, &bytes) })
	}
	if rc != 0 {
		r.finish()
		return true, mpiErr("MPI_Test", rc)
	}
	if flag == 0 {
		return false, nil
	}
	r.finish()
	if r.want >= 0 && int(bytes) != r.want {
		return true, fmt.Errorf("%w: mpi: received %d bytes, expected %d", errLength, int(bytes), r.want)
	}
	return true, nil
}

var errLength = errors.New("message of another length")

// testTries is how many MPI_Tests one Test makes (in one call into C)
// before the wait looks at its context: an 8-byte allreduce's tests cost
// about 50 ns each in C, the crossing from Go about as much again.
const testTries = 32

func (r *request) finish() {
	r.done = true
	if r.held {
		l := r.c.l
		l.inflightMu.Lock()
		delete(l.inflight, r)
		l.inflightMu.Unlock()
		r.held = false
	}
	r.pin.Unpin()
	for _, p := range r.cmem {
		C.free(p)
	}
	r.cmem = nil
}

// ptr pins b for the request's life and returns its address (a dummy for
// an empty buffer: MPI wants an address even for no bytes).
func (r *request) ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return C.goccl_dummy()
	}
	if !r.block { // a blocking call keeps no pointer once it returns
		r.pin.Pin(&b[0])
	}
	return unsafe.Pointer(&b[0])
}

// ints copies v into C memory that the request frees when it completes
// (MPI reads count and displacement arrays until then).
func (r *request) ints(v []int) *C.int {
	p := C.malloc(C.size_t(max(len(v), 1)) * C.size_t(unsafe.Sizeof(C.int(0))))
	r.cmem = append(r.cmem, p)
	a := unsafe.Slice((*C.int)(p), max(len(v), 1))
	for i, x := range v {
		a[i] = C.int(x)
	}
	return (*C.int)(p)
}

// overlaps reports whether a and b share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// same reports whether a is exactly b.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// offsets returns the element displacements of blocks of counts.
func offsets(counts []int) []int {
	d := make([]int, len(counts))
	for i := 1; i < len(counts); i++ {
		d[i] = d[i-1] + counts[i-1]
	}
	return d
}

func equal(counts []int) bool {
	for _, n := range counts {
		if n != counts[0] {
			return false
		}
	}
	return true
}

func (c *comm) Start(k *backend.Call) (backend.Request, error) {
	r := &request{c: c, want: -1}
	if err := c.run(k, r); err != nil {
		return nil, err
	}
	r.started = true
	c.l.inflightMu.Lock()
	c.l.inflight[r] = struct{}{}
	r.held = true
	c.l.inflightMu.Unlock()
	return r, nil
}

var _ backend.Blocker = (*comm)(nil)

// Blocks implements backend.Blocker: every collective, unless
// GOCCL_MPI_WAIT=poll.
func (c *comm) Blocks(k *backend.Call) bool {
	return !c.l.poll && k.Coll != backend.Send && k.Coll != backend.Recv
}

// Block implements backend.Blocker: k's blocking MPI call.
func (c *comm) Block(k *backend.Call) error {
	r := &c.blocked // one at a time: the group issues its calls in order
	*r = request{c: c, want: -1, block: true}
	c.l.blocking.Add(1)
	defer c.l.blocking.Add(-1)
	err := c.run(k, r)
	r.finish()
	return err
}

// run makes k's MPI call on r, where MPI allows it (do).
func (c *comm) run(k *backend.Call, r *request) error {
	send := k.Send
	if k.Coll != backend.AllGather && k.Coll != backend.Gather && overlaps(send, k.Recv) && !same(send, k.Recv) {
		send = append([]byte(nil), send...) // MPI forbids overlapping buffers outside MPI_IN_PLACE
	}
	what, rc := c.issueWhere(k, r, send)
	if rc != 0 {
		r.finish()
		if r.block { // MPI_Iallreduce's blocking twin is MPI_Allreduce
			what = "MPI_" + strings.ToUpper(what[5:6]) + what[6:]
		}
		return mpiErr(what, rc)
	}
	return nil
}

// issueWhere issues k where MPI allows it: directly with
// MPI_THREAD_MULTIPLE, else on the locked thread. (A closure for both
// would move what and rc to the heap on every call.)
func (c *comm) issueWhere(k *backend.Call, r *request, send []byte) (string, C.int) {
	if c.l.multiple {
		return c.issue(k, r, send)
	}
	var what string
	var rc C.int
	c.l.serial(func() { what, rc = c.issue(k, r, send) })
	return what, rc
}

// issue starts k's MPI call on r (Start has checked it and made send,
// k.Send or a copy of it that does not overlap k.Recv).
func (c *comm) issue(k *backend.Call, r *request, send []byte) (what string, rc C.int) {
	es := k.DType.Size()
	dt, op := C.int(k.DType), C.int(k.Op)
	n := C.int(len(k.Recv) / es)
	switch k.Coll {
	case backend.AllReduce:
		what, rc = "MPI_Iallreduce", C.goccl_allreduce(r.ptr(k.Recv), n, dt, op, c.c, &r.r, r.blk())
	case backend.Broadcast:
		what, rc = "MPI_Ibcast", C.goccl_bcast(r.ptr(k.Recv), n, dt, C.int(k.Root), c.c, &r.r, r.blk())
	case backend.Reduce:
		isRoot := C.int(0)
		if k.Root == c.rank {
			isRoot = 1
		}
		what, rc = "MPI_Ireduce", C.goccl_reduce(r.ptr(k.Recv), n, dt, op, C.int(k.Root), isRoot, c.c, &r.r, r.blk())
	case backend.AllGather:
		counts := k.RecvCounts
		if counts == nil {
			counts = make([]int, c.size)
			for i := range counts {
				counts[i] = len(k.Send) / es
			}
		}
		off := offsets(counts)
		mine := k.Recv[off[c.rank]*es : (off[c.rank]+counts[c.rank])*es]
		inplace := C.int(0)
		if same(send, mine) {
			inplace = 1
		} else if overlaps(send, k.Recv) {
			send = append([]byte(nil), send...)
		}
		if equal(counts) {
			what, rc = "MPI_Iallgather", C.goccl_allgather(r.ptr(send), inplace, r.ptr(k.Recv), C.int(counts[0]), dt, c.c, &r.r, r.blk())
		} else {
			what, rc = "MPI_Iallgatherv", C.goccl_allgatherv(r.ptr(send), inplace, C.int(counts[c.rank]), r.ptr(k.Recv),
				r.ints(counts), r.ints(offsets(counts)), dt, c.c, &r.r, r.blk())
		}
	case backend.ReduceScatter:
		if k.RecvCounts == nil || equal(k.RecvCounts) {
			what, rc = "MPI_Ireduce_scatter_block", C.goccl_reduce_scatter_block(r.ptr(send), r.ptr(k.Recv), n, dt, op, c.c, &r.r, r.blk())
		} else {
			what, rc = "MPI_Ireduce_scatter", C.goccl_reduce_scatter(r.ptr(send), r.ptr(k.Recv), r.ints(k.RecvCounts), dt, op, c.c, &r.r, r.blk())
		}
	case backend.AllToAll:
		if k.SendCounts == nil && k.RecvCounts == nil || equal(k.SendCounts) && equal(k.RecvCounts) && k.SendCounts[0] == k.RecvCounts[0] {
			what, rc = "MPI_Ialltoall", C.goccl_alltoall(r.ptr(send), r.ptr(k.Recv), C.int(len(k.Recv)/es/c.size), dt, c.c, &r.r, r.blk())
		} else {
			what, rc = "MPI_Ialltoallv", C.goccl_alltoallv(r.ptr(send), r.ints(k.SendCounts), r.ints(offsets(k.SendCounts)),
				r.ptr(k.Recv), r.ints(k.RecvCounts), r.ints(offsets(k.RecvCounts)), dt, c.c, &r.r, r.blk())
		}
	case backend.Gather:
		inplace := C.int(0)
		m := len(send)
		if k.Root == c.rank {
			if same(send, k.Recv[c.rank*m:(c.rank+1)*m]) {
				inplace = 1
			} else if overlaps(send, k.Recv) {
				send = append([]byte(nil), send...)
			}
		}
		what, rc = "MPI_Igather", C.goccl_gather(r.ptr(send), inplace, r.ptr(k.Recv), C.int(m/es), dt, C.int(k.Root), c.c, &r.r, r.blk())
	case backend.Scatter:
		inplace, m := C.int(0), len(k.Recv)
		if k.Root == c.rank && same(k.Recv, k.Send[c.rank*m:(c.rank+1)*m]) {
			inplace = 1
			send = k.Send
		}
		what, rc = "MPI_Iscatter", C.goccl_scatter(r.ptr(send), r.ptr(k.Recv), inplace, C.int(m/es), dt, C.int(k.Root), c.c, &r.r, r.blk())
	case backend.Send:
		what, rc = "MPI_Isend", C.goccl_send(r.ptr(k.Send), C.int(len(k.Send)), C.int(k.Root), C.int(k.Tag), c.c, &r.r)
	case backend.Recv:
		r.want = len(k.Recv)
		what, rc = "MPI_Irecv", C.goccl_recv(r.ptr(k.Recv), C.int(len(k.Recv)), C.int(k.Root), C.int(k.Tag), c.c, &r.r)
	case backend.Barrier:
		what, rc = "MPI_Ibarrier", C.goccl_barrier(c.c, &r.r, r.blk())
	default:
		what, rc = fmt.Sprint(k.Coll), -1
	}
	return what, rc
}

func (c *comm) Split(color, key int) (backend.Comm, error) {
	var out C.MPI_Comm
	var isNull, rc C.int
	c.l.do(func() { rc = C.goccl_split(c.c, C.int(color), C.int(key), &out, &isNull) })
	if rc != 0 {
		return nil, mpiErr("MPI_Comm_split", rc)
	}
	if isNull != 0 {
		return nil, nil
	}
	g := &comm{l: c.l, c: out}
	var rank, size C.int
	c.l.do(func() { C.MPI_Comm_rank(out, &rank); C.MPI_Comm_size(out, &size) })
	g.rank, g.size = int(rank), int(size)
	return g, nil
}

func (c *comm) Abort(code int) {
	if c.l.blocking.Load() > 0 {
		// A blocking call holds the library (and, serialized, the thread
		// that runs every call): abort from here, as a watchdog must,
		// and if the library returns, end the process; the launcher
		// then ends the others.
		C.goccl_abort(C.int(code))
		os.Exit(code)
	}
	c.l.do(func() { C.goccl_abort(C.int(code)) })
}

func (c *comm) Close() error {
	var rc C.int
	if !c.world {
		c.l.do(func() { rc = C.goccl_free(&c.c) })
		if rc != 0 {
			return mpiErr("MPI_Comm_free", rc)
		}
		return nil
	}
	if c.l.finalized {
		return nil
	}
	c.l.finalized = true
	c.l.serial(func() { rc = C.goccl_finalize() })
	if rc != 0 {
		return mpiErr("MPI_Finalize", rc)
	}
	return nil
}
