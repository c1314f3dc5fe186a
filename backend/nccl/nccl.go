//go:build cuda && cgo

package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/reduceop"
)

func init() { backend.Register(backend.NCCL, open) }

// IDWait bounds how long a member waits for its group's unique id from
// the group's rank 0 when the communicator comes up (the first call on
// device memory).
var IDWait = 5 * time.Minute

// ErrAborted is wrapped by the error of a call on a communicator that
// was aborted (ncclCommAbort: a call's deadline, a mismatch, Close after
// an abandoned call); it is goccl.ErrAborted.
var ErrAborted = fmt.Errorf("nccl: %w", backend.ErrAborted)

func open(rank, size int) (backend.Comm, error) {
	l, err := Load()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return &comm{lib: l, rank: rank, size: size, all: &family{}}, nil
}

// family is the communicators of one job, which the world's Abort ends.
type family struct {
	mu    sync.Mutex
	comms []*comm
}

// comm is one group's NCCL communicator, made when the group's first call
// on device memory starts (NCCL runs on one device, known then).
type comm struct {
	lib        *Lib
	rank, size int
	links      backend.Links
	all        *family
	parent     *comm

	mu      sync.Mutex
	c       commHandle // 0 until up
	dev     device.Device
	cuctx   uintptr // the device's CUDA context, made current for each NCCL call
	stream  device.Stream
	aborted atomic.Bool
	closed  bool

	evMu     sync.Mutex
	events   []device.Event // done events, recorded again by later calls
	evClosed bool
}

// event returns an event of dev for a call to record: a done one again,
// or a new one (creating an event per call would cost a call of the
// driver each time).
func (c *comm) event(dev device.Device) (device.Event, error) {
	c.evMu.Lock()
	if n := len(c.events); n > 0 {
		e := c.events[n-1]
		c.events = c.events[:n-1]
		c.evMu.Unlock()
		return e, nil
	}
	c.evMu.Unlock()
	return dev.NewEvent()
}

// putEvent keeps e, whose call is done, for a later call.
func (c *comm) putEvent(e device.Event) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	if len(c.events) < 16 && !c.evClosed {
		c.events = append(c.events, e)
		return
	}
	e.Destroy()
}

func (c *comm) Name() string { return string(backend.NCCL) }

// String is the library and its version, for the log of which backend
// Init opened.
func (c *comm) String() string { return c.lib.String() }

func (c *comm) Memory() backend.Memory { return backend.Device }

func (c *comm) Link(l backend.Links) {
	c.links, c.rank, c.size = l, l.Rank, len(l.Ranks)
	c.all.mu.Lock()
	c.all.comms = append(c.all.comms, c)
	c.all.mu.Unlock()
}

// pointer is what NCCL needs of a device buffer: its address (device/cuda's
// Buffer has it).
type pointer interface{ Ptr() uintptr }

// handle is what NCCL needs of a stream and of a device: the CUDA handle
// (device/cuda's Stream and Context have it).
type handle interface{ Handle() uintptr }

// ncclType maps goccl's dtypes to NCCL's, one to one; false for those NCCL
// has no name for (uint16, int16, bool, complex64, complex128).
func ncclType(dt reduceop.DType) (int, bool) {
	switch dt {
	case reduceop.Float32:
		return tFloat32, true
	case reduceop.Float64:
		return tFloat64, true
	case reduceop.Float16:
		return tFloat16, true
	case reduceop.BFloat16:
		return tBfloat16, true
	case reduceop.Int8:
		return tInt8, true
	case reduceop.Uint8:
		return tUint8, true
	case reduceop.Int32:
		return tInt32, true
	case reduceop.Uint32:
		return tUint32, true
	case reduceop.Int64:
		return tInt64, true
	case reduceop.Uint64:
		return tUint64, true
	}
	return 0, false
}

// ncclOp maps goccl's ops to NCCL's; false for BAnd, BOr and BXor, which
// NCCL lacks. Avg is mapped by the call (ncclAvg or Sum and a scale).
func ncclOp(op reduceop.Op) (int, bool) {
	switch op {
	case reduceop.Sum:
		return opSum, true
	case reduceop.Prod:
		return opProd, true
	case reduceop.Min:
		return opMin, true
	case reduceop.Max:
		return opMax, true
	case reduceop.Avg:
		return opAvg, true
	}
	return 0, false
}

func reduces(k backend.Coll) bool {
	return k == backend.AllReduce || k == backend.Reduce || k == backend.ReduceScatter
}

// Takes: calls on device memory of device/cuda (buffers with an address,
// a device with a context); reductions of the dtypes and ops NCCL names;
// the collectives NCCL has or makes of grouped sends and receives. Not
// taken, so on goccl's own path: host memory, BAnd/BOr/BXor, uint16,
// int16, bool and complex reductions, allgather and reduce-scatter of
// unequal blocks, Send and Recv (NCCL has no tags: goccl's point-to-point
// calls keep their own matching over goccl's links) and barriers.
func (c *comm) Takes(k *backend.Call) bool {
	if k.RecvDev == nil && k.SendDev == nil {
		return false
	}
	for _, b := range []device.Buffer{k.SendDev, k.RecvDev} {
		if b == nil {
			continue
		}
		if _, ok := b.(pointer); !ok {
			return false
		}
		if _, ok := b.Device().(handle); !ok {
			return false
		}
	}
	if k.Stream != nil {
		if _, ok := k.Stream.(handle); !ok {
			return false
		}
	}
	if reduces(k.Coll) {
		if _, ok := ncclType(k.DType); !ok {
			return false
		}
		if _, ok := ncclOp(k.Op); !ok {
			return false
		}
	}
	switch k.Coll {
	case backend.AllToAll:
		// Grouped sends and receives cannot run in place.
		s, r := addr(k.SendDev, 0), addr(k.RecvDev, 0)
		return s+uintptr(bytesOf(k.SendDev)) <= r || r+uintptr(bytesOf(k.RecvDev)) <= s
	case backend.AllReduce, backend.Broadcast, backend.Reduce, backend.Gather, backend.Scatter:
		return true
	case backend.AllGather, backend.ReduceScatter:
		return k.RecvCounts == nil || equal(k.RecvCounts)
	}
	return false
}

func equal(v []int) bool {
	for _, x := range v {
		if x != v[0] {
			return false
		}
	}
	return true
}

// up makes the communicator on dev if it is not made yet: the group's
// rank 0 makes a unique id and sends it to the other members over goccl's
// links, and every member calls ncclCommInitRank (which waits for all).
func (c *comm) up(dev device.Device) error {
	if c.aborted.Load() {
		return ErrAborted
	}
	if c.c != 0 {
		if dev != c.dev {
			return fmt.Errorf("nccl: the group's communicator runs on %v; a call on %v cannot join it", c.dev, dev)
		}
		return nil
	}
	if c.links.EP == nil {
		return errors.New("nccl: the communicator has no links to share its id over")
	}
	id := make([]byte, IDBytes)
	tag := wire.BackendIDTag(c.links.ID)
	ctx, cancel := context.WithTimeout(context.Background(), IDWait)
	defer cancel()
	if c.rank == 0 {
		if err := uniqueID(id); err != nil {
			return err
		}
		for q, er := range c.links.Ranks {
			if q != 0 {
				if err := c.links.EP.Isend(er, tag, id).Wait(ctx); err != nil {
					return fmt.Errorf("nccl: sending the unique id to rank %d: %w", q, err)
				}
			}
		}
	} else if err := c.links.EP.Irecv(c.links.Ranks[0], tag, id).Wait(ctx); err != nil {
		return fmt.Errorf("nccl: the unique id from rank 0: %w", err)
	}
	cuctx := dev.(handle).Handle()
	nc, err := initRank(cuctx, c.size, id, c.rank)
	if err != nil {
		return err
	}
	return c.adopt(nc, dev, cuctx)
}

// adopt makes nc, on dev, c's communicator, with a stream of its own.
func (c *comm) adopt(nc commHandle, dev device.Device, cuctx uintptr) error {
	s, err := dev.NewStream()
	if err != nil {
		destroyComm(nc)
		return fmt.Errorf("nccl: a stream for the communicator: %w", err)
	}
	c.c, c.dev, c.cuctx, c.stream = nc, dev, cuctx, s
	return nil
}

// Split: where the parent's communicator is up and the library has
// ncclCommSplit, the group's is split from it now (every rank of the
// parent calls Split, in order, as ncclCommSplit needs); else the group
// makes its own with an id of its own at its first call on device memory.
func (c *comm) Split(color, key int) (backend.Comm, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	child := &comm{lib: c.lib, all: c.all, parent: c}
	if c.c != 0 && c.lib.Split && !c.aborted.Load() {
		nc, err := splitComm(c.cuctx, c.c, color, key)
		if err != nil {
			return nil, err
		}
		if color < 0 {
			return nil, nil
		}
		if err := child.adopt(nc, c.dev, c.cuctx); err != nil {
			return nil, err
		}
		return child, nil
	}
	if color < 0 {
		return nil, nil
	}
	return child, nil
}

// abort aborts the communicator (once); later calls fail with ErrAborted.
func (c *comm) abort() {
	if c.aborted.Swap(true) {
		return
	}
	c.mu.Lock()
	nc := c.c
	c.mu.Unlock()
	if nc != 0 {
		abortComm(nc)
	}
}

// Abort aborts every communicator of the job: a call was abandoned.
func (c *comm) Abort(code int) {
	c.all.mu.Lock()
	comms := append([]*comm(nil), c.all.comms...)
	c.all.mu.Unlock()
	for _, x := range comms {
		x.abort()
	}
}

func (c *comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	if c.c != 0 && !c.aborted.Load() {
		err = destroyComm(c.c)
	}
	if c.stream != nil {
		err = errors.Join(err, c.stream.Destroy())
	}
	c.evMu.Lock()
	for _, e := range c.events {
		e.Destroy()
	}
	c.events, c.evClosed = nil, true
	c.evMu.Unlock()
	return err
}

// asyncErr is the communicator's asynchronous error, nil while it has none.
func (c *comm) asyncErr() error {
	e, err := asyncError(c.c)
	if err != nil {
		return err
	}
	if e != 0 && e != resultInProgress {
		return &Error{Code: e, What: "the communicator's asynchronous error"}
	}
	return nil
}

// request is a call enqueued on a stream, done when the event recorded
// after it is.
type request struct {
	c    *comm
	ev   device.Event
	done bool
	err  error
}

func (r *request) Test() (bool, error) {
	if r.done {
		return true, r.err
	}
	if r.c.aborted.Load() { // the communicator is gone: ask it nothing
		r.done, r.err = true, ErrAborted
		return true, r.err
	}
	ok, err := r.ev.Done()
	if err == nil {
		if aerr := r.c.asyncErr(); aerr != nil {
			err = aerr
		} else if !ok {
			return false, nil
		}
	}
	r.done, r.err = true, err
	if err == nil {
		r.c.putEvent(r.ev)
	} else {
		r.ev.Destroy()
	}
	return true, err
}

// Cancel aborts the communicator: NCCL cannot take back one call.
func (r *request) Cancel() { r.c.abort() }

// addr is the device address of b's byte off.
func addr(b device.Buffer, off int) uintptr {
	if b == nil {
		return 0
	}
	return b.(pointer).Ptr() + uintptr(off)
}

func (c *comm) Start(k *backend.Call) (backend.Request, error) {
	dev := k.RecvDev
	if dev == nil {
		dev = k.SendDev
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.up(dev.Device()); err != nil {
		return nil, err
	}
	s := c.stream
	if k.Stream != nil {
		s = k.Stream
	}
	ops, scale := c.plan(k)
	if i, err := issue(c.cuctx, c.c, s.(handle).Handle(), ops); err != nil {
		return nil, fmt.Errorf("%v (NCCL call %d of %d): %w", k.Coll, i+1, len(ops), err)
	}
	if scale > 0 {
		if err := s.Scale(k.RecvDev, 0, k.RecvDev.Len(), scale); err != nil {
			return nil, fmt.Errorf("nccl: Avg as Sum and a scale: %w", err)
		}
	}
	ev, err := c.event(dev.Device())
	if err != nil {
		return nil, err
	}
	if err := s.Record(ev); err != nil {
		ev.Destroy()
		return nil, err
	}
	issued.Add(1)
	return &request{c: c, ev: ev}, nil
}

var issued atomic.Uint64

// Issued is how many goccl calls this process has issued on NCCL (tests,
// and goccl bench's check that NCCL ran).
func Issued() uint64 { return issued.Load() }

func bytesOf(b device.Buffer) int {
	if b == nil {
		return 0
	}
	return b.Len() * b.DType().Size()
}

// plan turns k into NCCL calls: the collectives NCCL has one to one (data
// that is only moved goes as bytes, ncclUint8, whatever its dtype), and
// all-to-all, gather and scatter as grouped sends and receives. scale > 0:
// Avg runs as Sum and the result is divided by scale on the stream after
// (an NCCL before 2.10, or integers, which goccl divides as reduceop does).
func (c *comm) plan(k *backend.Call) (ops []op, scale int) {
	dt, _ := ncclType(k.DType)
	rop, _ := ncclOp(k.Op)
	es := k.DType.Size()
	if k.Op == reduceop.Avg && (!c.lib.Avg() || !k.DType.IsFloat()) {
		rop = opSum
		if k.Coll != backend.Reduce || k.Root == c.rank {
			scale = c.size
		}
	}
	send, recv := addr(k.SendDev, 0), addr(k.RecvDev, 0)
	switch k.Coll {
	case backend.AllReduce, backend.Reduce:
		if send == 0 {
			send = recv
		}
		return []op{{coll: int(k.Coll), dt: dt, op: rop, root: k.Root, send: send, recv: recv, count: k.RecvDev.Len()}}, scale
	case backend.Broadcast:
		return []op{{coll: int(k.Coll), dt: tUint8, root: k.Root, send: recv, recv: recv, count: bytesOf(k.RecvDev)}}, 0
	case backend.AllGather:
		return []op{{coll: int(k.Coll), dt: tUint8, send: send, recv: recv, count: bytesOf(k.SendDev)}}, 0
	case backend.ReduceScatter:
		return []op{{coll: int(k.Coll), dt: dt, op: rop, send: send, recv: recv, count: k.RecvDev.Len()}}, scale
	case backend.AllToAll:
		sc, rc := k.SendCounts, k.RecvCounts
		if sc == nil {
			sc = blocks(bytesOf(k.SendDev)/es, c.size)
		}
		if rc == nil {
			rc = blocks(bytesOf(k.RecvDev)/es, c.size)
		}
		so, ro := 0, 0
		for q := range c.size {
			if sc[q] > 0 {
				ops = append(ops, op{coll: int(backend.Send), dt: tUint8, root: q, send: send + uintptr(so*es), count: sc[q] * es})
			}
			if rc[q] > 0 {
				ops = append(ops, op{coll: int(backend.Recv), dt: tUint8, root: q, recv: recv + uintptr(ro*es), count: rc[q] * es})
			}
			so, ro = so+sc[q], ro+rc[q]
		}
	case backend.Gather:
		m := bytesOf(k.SendDev)
		if m > 0 && !(c.rank == k.Root && send == recv+uintptr(c.rank*m)) {
			ops = append(ops, op{coll: int(backend.Send), dt: tUint8, root: k.Root, send: send, count: m})
		}
		if c.rank == k.Root && m > 0 {
			for q := range c.size {
				if q != c.rank || send != recv+uintptr(q*m) {
					ops = append(ops, op{coll: int(backend.Recv), dt: tUint8, root: q, recv: recv + uintptr(q*m), count: m})
				}
			}
		}
	case backend.Scatter:
		m := bytesOf(k.RecvDev)
		if c.rank == k.Root && m > 0 {
			for q := range c.size {
				if q != c.rank || recv != send+uintptr(q*m) {
					ops = append(ops, op{coll: int(backend.Send), dt: tUint8, root: q, send: send + uintptr(q*m), count: m})
				}
			}
		}
		if m > 0 && !(c.rank == k.Root && recv == send+uintptr(c.rank*m)) {
			ops = append(ops, op{coll: int(backend.Recv), dt: tUint8, root: k.Root, recv: recv, count: m})
		}
	}
	return ops, 0
}

// blocks is n elements in size equal blocks.
func blocks(n, size int) []int {
	b := make([]int, size)
	for i := range b {
		b[i] = n / size
	}
	return b
}
