package goccl

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"
	"unsafe"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// The device data path: a collective on a device buffer runs the same
// algorithm (algo/...) as on a host slice, segment by segment, with the
// reductions on the device.
//
// The algorithm is handed a stand-in for the device buffer: a range of
// reserved address space (reserve) of the buffer's length, which it slices
// as it would slice host memory but never reads, because every byte it
// moves goes through its Peers. devPeers maps an address in a stand-in back
// to (device buffer, byte offset) and does the real work:
//
//	Isend(to, b)   each chunk of b: device -> pinned slot on the send stream,
//	               then, once its event completes, the slot goes on the wire
//	Irecv(from, b) each chunk of b: wire -> pinned slot, then pinned slot ->
//	               device on the recv stream; the request completes when the
//	               copy has
//	Reduce(d, s)   our kernel on the compute stream: d op= s, both on device
//	Copy(d, s)     device-to-device copy on the compute stream
//	GetScratch(n)  device scratch memory, behind a stand-in of its own
//
// A message is cut into chunks of at most devChunk bytes, each its own
// transport message; the receiver, being a devPeers too, cuts the same way
// (the fingerprint carries the chunking, so a rank with a host buffer and
// one with a device buffer in one call fail with ErrMismatch instead of
// misreading each other). Each peer and direction has a lane: chunks go
// through it in order, at most devSlots at a time, each in a pinned slot
// from the communicator's pool, so the pinned memory in use is bounded and
// allocated once per communicator, not per call. While chunk k is on the
// wire, chunk k+1 is being copied off the device and the algorithm reduces
// chunk k-1: the overlap comes from the lanes running beside the
// algorithm's own goroutine.
//
// Reduce and Copy wait for their kernel before they return, so the
// algorithm's rule that a buffer is not touched while a request on it is
// pending is all the ordering the device work needs.

const (
	devChunk = 1 << 20 // bytes in one message on the wire and one pinned slot
	devSlots = 4       // chunks in flight per lane
)

// devCtx is what a communicator keeps for one device: pools of stream
// sets, pinned slots, events and scratch memory. It is made on the first
// collective on the device and freed by Close.
type devCtx struct {
	dev   device.Device
	noIPC bool // GOCCL_DEVICE_IPC=0: offer no handles, refuse the peers'

	mu      sync.Mutex
	sets    []*streamSet                   // free stream sets
	allSets []*streamSet                   // every stream set, for Close
	slots   []device.Host                  // free pinned slots of devChunk bytes
	all     []device.Host                  // every slot, for Close
	events  []device.Event                 // free events
	scratch map[scratchKey][]device.Buffer // free device scratch by dtype and size class
	allScr  []device.Buffer                // every scratch buffer, for Close
	wins    map[int][][]byte               // free stand-ins by size class
	bounce  map[int][]device.Host          // free pinned staging by size class (staged collectives)
	allBnc  []device.Host                  // every staging buffer, for Close

	ipcRefused map[int]bool         // job ranks that refused this rank's IPC handles (devipc.go)
	notes      map[ipcNote]int      // IPC events per peer, logged once (devipc.go)
	ipcOpen    map[string]*ipcEntry // peers' handles kept open (devipc.go)
	ipcTick    uint64
}

// streamSet is the streams one call runs on: device to host copies for
// the send lanes, host to device copies for the receive lanes, and kernels
// and device copies for the algorithm. A call has a set of its own, so
// that calls in flight together (async, or on a framework's stream, where
// a call waits for the one before it) never queue behind each other.
type streamSet struct {
	send, recv, compute device.Stream
}

type scratchKey struct {
	dt    reduceop.DType
	class int
}

// devices is a communicator's devCtx per device, shared by its groups.
type devices struct {
	mu    sync.Mutex
	m     map[device.Device]*devCtx
	noIPC bool // GOCCL_DEVICE_IPC=0 (devipc.go)
}

func (ds *devices) get(dev device.Device) (*devCtx, error) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.m[dev]; d != nil {
		return d, nil
	}
	d := &devCtx{dev: dev, noIPC: ds.noIPC, scratch: map[scratchKey][]device.Buffer{}, wins: map[int][][]byte{}, bounce: map[int][]device.Host{}}
	if ds.m == nil {
		ds.m = map[device.Device]*devCtx{}
	}
	ds.m[dev] = d
	return d, nil
}

// close frees every device's resources (Comm.Close).
func (ds *devices) close() {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for _, d := range ds.m {
		d.close()
	}
	ds.m = nil
}

func (d *devCtx) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ss := range d.allSets {
		for _, s := range []device.Stream{ss.send, ss.recv, ss.compute} {
			if s != nil {
				s.Destroy()
			}
		}
	}
	d.sets, d.allSets = nil, nil
	for _, h := range d.all {
		h.Free()
	}
	for _, h := range d.allBnc {
		h.Free()
	}
	for _, b := range d.allScr {
		b.Free()
	}
	for _, e := range d.events {
		e.Destroy()
	}
	for _, ws := range d.wins {
		for _, w := range ws {
			release(w)
		}
	}
	for _, e := range d.ipcOpen {
		e.buf.Free()
	}
	d.all, d.allBnc, d.allScr, d.events, d.slots, d.wins, d.ipcOpen = nil, nil, nil, nil, nil, nil, nil
}

// streams returns a free stream set.
func (d *devCtx) streams() (*streamSet, error) {
	d.mu.Lock()
	if k := len(d.sets); k > 0 {
		ss := d.sets[k-1]
		d.sets = d.sets[:k-1]
		d.mu.Unlock()
		return ss, nil
	}
	d.mu.Unlock()
	ss := &streamSet{}
	for _, s := range []*device.Stream{&ss.send, &ss.recv, &ss.compute} {
		var err error
		if *s, err = d.dev.NewStream(); err != nil {
			for _, made := range []device.Stream{ss.send, ss.recv, ss.compute} {
				if made != nil {
					made.Destroy()
				}
			}
			return nil, fmt.Errorf("%v: new stream: %w", d.dev, err)
		}
	}
	d.mu.Lock()
	d.allSets = append(d.allSets, ss)
	d.mu.Unlock()
	return ss, nil
}

// putStreams returns a set whose work has all been waited for.
func (d *devCtx) putStreams(ss *streamSet) {
	d.mu.Lock()
	d.sets = append(d.sets, ss)
	d.mu.Unlock()
}

func sizeClass(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// slot returns a free pinned slot of devChunk bytes.
func (d *devCtx) slot() ([]byte, device.Host, error) {
	d.mu.Lock()
	if k := len(d.slots); k > 0 {
		h := d.slots[k-1]
		d.slots = d.slots[:k-1]
		d.mu.Unlock()
		return h.Bytes(), h, nil
	}
	d.mu.Unlock()
	h, err := d.dev.AllocHost(devChunk)
	if err != nil {
		return nil, nil, fmt.Errorf("%v: pinned slot: %w", d.dev, err)
	}
	d.mu.Lock()
	d.all = append(d.all, h)
	d.mu.Unlock()
	return h.Bytes(), h, nil
}

func (d *devCtx) putSlot(h device.Host) {
	d.mu.Lock()
	d.slots = append(d.slots, h)
	d.mu.Unlock()
}

func (d *devCtx) event() (device.Event, error) {
	d.mu.Lock()
	if k := len(d.events); k > 0 {
		e := d.events[k-1]
		d.events = d.events[:k-1]
		d.mu.Unlock()
		return e, nil
	}
	d.mu.Unlock()
	e, err := d.dev.NewEvent()
	if err != nil {
		return nil, fmt.Errorf("%v: new event: %w", d.dev, err)
	}
	return e, nil
}

func (d *devCtx) putEvent(e device.Event) {
	d.mu.Lock()
	d.events = append(d.events, e)
	d.mu.Unlock()
}

// run enqueues work on s, records an event after it and waits for it.
func (d *devCtx) run(ctx context.Context, s device.Stream, work func() error) error {
	if err := work(); err != nil {
		return err
	}
	e, err := d.event()
	if err != nil {
		return err
	}
	if err := s.Record(e); err != nil {
		return err
	}
	if err := e.Wait(ctx); err != nil {
		return err // e may still complete later: do not reuse it
	}
	d.putEvent(e)
	return nil
}

// scratchBuf returns device memory for n bytes of dt.
func (d *devCtx) scratchBuf(dt reduceop.DType, n int) (device.Buffer, error) {
	key := scratchKey{dt, sizeClass(n)}
	d.mu.Lock()
	if free := d.scratch[key]; len(free) > 0 {
		b := free[len(free)-1]
		d.scratch[key] = free[:len(free)-1]
		d.mu.Unlock()
		return b, nil
	}
	d.mu.Unlock()
	b, err := d.dev.Alloc(dt, (1<<key.class+dt.Size()-1)/dt.Size())
	if err != nil {
		return nil, fmt.Errorf("%v: scratch of %d bytes: %w", d.dev, n, err)
	}
	d.mu.Lock()
	d.allScr = append(d.allScr, b)
	d.mu.Unlock()
	return b, nil
}

func (d *devCtx) putScratch(dt reduceop.DType, n int, b device.Buffer) {
	key := scratchKey{dt, sizeClass(n)}
	d.mu.Lock()
	d.scratch[key] = append(d.scratch[key], b)
	d.mu.Unlock()
}

// window returns a stand-in of n bytes (see reserve).
func (d *devCtx) window(n int) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	class := sizeClass(n)
	d.mu.Lock()
	if free := d.wins[class]; len(free) > 0 {
		w := free[len(free)-1]
		d.wins[class] = free[:len(free)-1]
		d.mu.Unlock()
		return w[:n], nil
	}
	d.mu.Unlock()
	w, err := reserve(1 << class)
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes of address space: %w", 1<<class, err)
	}
	return w[:n], nil
}

func (d *devCtx) putWindow(w []byte) {
	if cap(w) == 0 {
		return
	}
	class := sizeClass(cap(w))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.wins == nil { // closed
		release(w[:cap(w)])
		return
	}
	d.wins[class] = append(d.wins[class], w[:cap(w)])
}

// pinned returns page-locked staging memory of at least n bytes, for the
// collectives that still stage a whole buffer.
func (d *devCtx) pinned(n int) (device.Host, error) {
	class := sizeClass(n)
	d.mu.Lock()
	if free := d.bounce[class]; len(free) > 0 {
		h := free[len(free)-1]
		d.bounce[class] = free[:len(free)-1]
		d.mu.Unlock()
		return h, nil
	}
	d.mu.Unlock()
	h, err := d.dev.AllocHost(1 << class)
	if err != nil {
		return nil, fmt.Errorf("%v: pinned staging of %d bytes: %w", d.dev, n, err)
	}
	d.mu.Lock()
	d.allBnc = append(d.allBnc, h)
	d.mu.Unlock()
	return h, nil
}

func (d *devCtx) putPinned(h device.Host) {
	class := sizeClass(len(h.Bytes()))
	d.mu.Lock()
	d.bounce[class] = append(d.bounce[class], h)
	d.mu.Unlock()
}

// toHost copies len(dst) bytes of b from byte off into dst (any host
// memory) through pinned staging, and waits.
func (d *devCtx) toHost(ctx context.Context, dst []byte, b device.Buffer, off int) error {
	if len(dst) == 0 {
		return nil
	}
	h, err := d.pinned(len(dst))
	if err != nil {
		return err
	}
	ss, err := d.streams()
	if err != nil {
		return err
	}
	p := h.Bytes()[:len(dst)]
	if err := d.run(ctx, ss.compute, func() error { return ss.compute.CopyToHost(p, b, off) }); err != nil {
		return err // the copy may still land in h: do not reuse h or the stream
	}
	d.putStreams(ss)
	copy(dst, p)
	d.putPinned(h)
	return nil
}

// fromHost copies src into b from byte off through pinned staging, and
// waits.
func (d *devCtx) fromHost(ctx context.Context, b device.Buffer, off int, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	h, err := d.pinned(len(src))
	if err != nil {
		return err
	}
	ss, err := d.streams()
	if err != nil {
		return err
	}
	p := h.Bytes()[:len(src)]
	copy(p, src)
	if err := d.run(ctx, ss.compute, func() error { return ss.compute.CopyFromHost(b, off, p) }); err != nil {
		return err
	}
	d.putStreams(ss)
	d.putPinned(h)
	return nil
}

// region is a stand-in and the device memory it stands for.
type region struct {
	win []byte
	buf device.Buffer
	off int // byte offset of win[0] in buf
}

// devPeers is the algo.Peers of a collective on device memory.
type devPeers struct {
	*peers
	ctx context.Context
	d   *devCtx
	ss  *streamSet
	dt  reduceop.DType
	op  reduceop.Op

	mu      sync.Mutex // guards everything below, and calls into peers
	regions []region
	lanes   map[laneKey]*lane
	scr     map[uintptr]device.Buffer // scratch stand-in -> its memory
	dead    chan struct{}             // closed when a lane fails or the call ends
	err     error
	wg      sync.WaitGroup
}

// SegmentBytes keeps a device call's segments at the algorithms' default:
// its messages are cut into chunks of their own (k.chunk).
func (dp *devPeers) SegmentBytes() int { return 0 }

type laneKey struct {
	peer int
	send bool
}

var (
	_ algo.Peers     = (*devPeers)(nil)
	_ algo.Scratcher = (*devPeers)(nil)
	_ algo.Copier    = (*devPeers)(nil)
)

func newDevPeers(ctx context.Context, p *peers, d *devCtx, ss *streamSet, dt reduceop.DType, op reduceop.Op) *devPeers {
	return &devPeers{peers: p, ctx: ctx, d: d, ss: ss, dt: dt, op: op,
		lanes: map[laneKey]*lane{}, scr: map[uintptr]device.Buffer{}, dead: make(chan struct{})}
}

// stand returns a stand-in for n bytes of buf from byte off.
func (p *devPeers) stand(buf device.Buffer, off, n int) ([]byte, error) {
	w, err := p.d.window(n)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.regions = append(p.regions, region{win: w, buf: buf, off: off})
	p.mu.Unlock()
	return w, nil
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// where maps b, a slice of a stand-in, to its device memory; ok is false
// for host memory.
func (p *devPeers) where(b []byte) (buf device.Buffer, off int, ok bool) {
	a := addr(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.regions {
		lo := addr(r.win)
		if len(r.win) > 0 && a >= lo && a+uintptr(len(b)) <= lo+uintptr(len(r.win)) {
			return r.buf, r.off + int(a-lo), true
		}
	}
	return nil, 0, false
}

func (p *devPeers) GetScratch(n int) []byte {
	b, err := p.d.scratchBuf(p.dt, n)
	if err != nil {
		p.fail(err)
		return make([]byte, n) // host memory: the next device operation on it fails
	}
	w, err := p.stand(b, 0, n)
	if err != nil {
		p.d.putScratch(p.dt, n, b)
		p.fail(err)
		return make([]byte, n)
	}
	p.mu.Lock()
	p.scr[addr(w)] = b
	p.mu.Unlock()
	return w
}

func (p *devPeers) PutScratch(w []byte) {
	p.mu.Lock()
	b, ok := p.scr[addr(w)]
	delete(p.scr, addr(w))
	for i, r := range p.regions {
		if addr(r.win) == addr(w) {
			p.regions = append(p.regions[:i], p.regions[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	if ok {
		p.d.putScratch(p.dt, len(w), b)
		p.d.putWindow(w)
	}
}

// fail records the first error of a lane and stops every lane.
func (p *devPeers) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		close(p.dead)
	}
}

func (p *devPeers) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// device returns the device memory behind dst and src, or an error naming
// the operation when either is host memory.
func (p *devPeers) pair(op string, dst, src []byte) (db device.Buffer, doff int, sb device.Buffer, soff int, err error) {
	if len(dst) != len(src) {
		return nil, 0, nil, 0, fmt.Errorf("%s: dst has %d bytes, src %d", op, len(dst), len(src))
	}
	var ok1, ok2 bool
	db, doff, ok1 = p.where(dst)
	sb, soff, ok2 = p.where(src)
	if !ok1 || !ok2 {
		return nil, 0, nil, 0, fmt.Errorf("%s: host memory in a collective on device memory", op)
	}
	return db, doff, sb, soff, nil
}

func (p *devPeers) Reduce(dst, src []byte) error {
	if len(dst) == 0 && len(src) == 0 {
		return nil
	}
	db, doff, sb, soff, err := p.pair("reduce", dst, src)
	if err != nil {
		return err
	}
	s := p.ss.compute
	return p.d.run(p.ctx, s, func() error { return s.Reduce(p.op, db, doff, sb, soff, len(dst)/p.dt.Size()) })
}

func (p *devPeers) Copy(dst, src []byte) error {
	if len(dst) == 0 && len(src) == 0 {
		return nil
	}
	db, doff, sb, soff, err := p.pair("copy", dst, src)
	if err != nil {
		return err
	}
	s := p.ss.compute
	return p.d.run(p.ctx, s, func() error { return s.Copy(db, doff, sb, soff, len(dst)) })
}

func (p *devPeers) Isend(to int, b []byte) algo.Request { return p.enqueue(to, true, b) }

func (p *devPeers) Irecv(from int, b []byte) algo.Request { return p.enqueue(from, false, b) }

// enqueue cuts b into chunks and queues them on the lane to or from peer.
func (p *devPeers) enqueue(peer int, send bool, b []byte) algo.Request {
	r := &devRequest{done: make(chan struct{})}
	buf, off, onDev := p.where(b)
	ipc := p.useIPC(peer, onDev, len(b))
	n := max(1, (len(b)+devChunk-1)/devChunk)
	if ipc {
		n = 1 // one item: the lane runs it whole (devipc.go)
	}
	r.left = n
	p.mu.Lock()
	l := p.lanes[laneKey{peer, send}]
	if l == nil {
		l = &lane{p: p, peer: peer, send: send, wake: make(chan struct{}, 1)}
		p.lanes[laneKey{peer, send}] = l
		l.start()
	}
	p.mu.Unlock()
	if ipc {
		l.push(chunk{req: r, buf: buf, off: off, n: len(b), ipc: true})
		return r
	}
	for i := 0; i < n; i++ {
		lo, hi := i*devChunk, min((i+1)*devChunk, len(b))
		c := chunk{req: r, n: hi - lo}
		if onDev {
			c.buf, c.off = buf, off+lo
		} else {
			c.host = b[lo:hi]
		}
		l.push(c)
	}
	return r
}

// finish stops the lanes once the algorithm has returned, and returns the
// stand-ins and scratch to the pools (only after success: after a failure
// a transport or a copy may still be using them).
//
// After a failure the lanes are not waited for: a chunk may be blocked on
// a transport request that only the abort which follows the failure ends.
func (p *devPeers) finish(ok bool) {
	p.fail(errCallOver)
	p.mu.Lock()
	for _, l := range p.lanes {
		l.close()
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.regions {
		if b, isScr := p.scr[addr(r.win)]; isScr {
			p.d.putScratch(p.dt, len(r.win), b)
		}
		p.d.putWindow(r.win)
	}
	p.regions, p.scr = nil, nil
}

var errCallOver = fmt.Errorf("goccl: the collective has ended")

// devRequest is an Isend or Irecv of several chunks.
type devRequest struct {
	mu   sync.Mutex
	left int
	err  error
	done chan struct{}
}

func (r *devRequest) chunkDone(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.left == 0 {
		return
	}
	if err != nil && r.err == nil {
		r.err = err
	}
	r.left--
	if r.left == 0 || err != nil {
		r.left = 0
		close(r.done)
	}
}

func (r *devRequest) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// chunk is one message of a lane: device memory (buf, off) or host bytes;
// or, with ipc, a whole message between ranks of one host (devipc.go).
type chunk struct {
	req  *devRequest
	buf  device.Buffer
	off  int
	host []byte
	n    int
	ipc  bool
}

// lane moves the chunks to or from one peer, in order, at most devSlots at
// a time.
type lane struct {
	p    *devPeers
	peer int
	send bool

	mu     sync.Mutex
	q      []chunk
	closed bool
	wake   chan struct{}
}

func (l *lane) push(c chunk) {
	l.mu.Lock()
	l.q = append(l.q, c)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// next returns the next chunk, or false once the lane is closed and empty.
func (l *lane) next() (chunk, bool) {
	for {
		l.mu.Lock()
		if len(l.q) > 0 {
			c := l.q[0]
			l.q = l.q[1:]
			l.mu.Unlock()
			return c, true
		}
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return chunk{}, false
		}
		<-l.wake
	}
}

// inFlight is a chunk that holds a pinned slot.
type inFlight struct {
	chunk
	mem  []byte      // the slot's bytes for this chunk, or the host chunk
	slot device.Host // nil for a host chunk
	ev   device.Event
	err  error
	r    algo.Request
}

// start runs the lane: two goroutines joined by a channel of at most
// devSlots chunks, so that at most that many slots are taken.
func (l *lane) start() {
	p := l.p
	ch := make(chan inFlight, devSlots-1)
	slots := make(chan struct{}, devSlots)
	for range devSlots {
		slots <- struct{}{}
	}
	p.wg.Add(2)
	go func() { // take a slot, start the chunk
		defer p.wg.Done()
		defer close(ch)
		for {
			c, ok := l.next()
			if !ok {
				return
			}
			if err := p.failed(); err != nil {
				c.req.chunkDone(err)
				continue
			}
			if c.ipc {
				c.req.chunkDone(l.whole(c, slots))
				continue
			}
			select {
			case <-slots:
			case <-p.dead:
				c.req.chunkDone(p.failed())
				continue
			}
			f := l.begin(c)
			ch <- f
		}
	}()
	go func() { // finish chunks in order, give back their slots
		defer p.wg.Done()
		for f := range ch {
			err := l.end(&f)
			if err != nil {
				p.fail(err)
			} else if f.slot != nil {
				p.d.putSlot(f.slot)
			}
			f.req.chunkDone(err)
			slots <- struct{}{}
		}
	}()
}

// whole runs an IPC item once every chunk before it has finished (all
// the lane's slots are back), holding the slots while it runs.
func (l *lane) whole(c chunk, slots chan struct{}) error {
	p := l.p
	for got := 0; got < devSlots; got++ {
		select {
		case <-slots:
		case <-p.dead:
			for range got {
				slots <- struct{}{}
			}
			return p.failed()
		}
	}
	defer func() {
		for range devSlots {
			slots <- struct{}{}
		}
	}()
	err := l.ipc(c)
	if err != nil {
		p.fail(err)
	}
	return err
}

// begin starts a chunk: for a send, the copy off the device; for a
// receive, the transport receive into a slot.
func (l *lane) begin(c chunk) inFlight {
	p := l.p
	f := inFlight{chunk: c, mem: c.host}
	if c.host == nil && c.n > 0 {
		mem, h, err := p.d.slot()
		if err != nil {
			f.err = err
			return f
		}
		f.mem, f.slot = mem[:c.n], h
	}
	if f.mem == nil {
		f.mem = []byte{}
	}
	if l.send {
		if f.slot != nil {
			s := p.ss.send
			if f.ev, f.err = p.d.event(); f.err == nil {
				if f.err = s.CopyToHost(f.mem, c.buf, c.off); f.err == nil {
					f.err = s.Record(f.ev)
				}
			}
		}
		return f
	}
	p.mu.Lock()
	f.r = p.peers.Irecv(l.peer, f.mem)
	p.mu.Unlock()
	return f
}

// end finishes a chunk: for a send, it waits for the copy and sends; for a
// receive, it waits for the bytes and copies them onto the device.
func (l *lane) end(f *inFlight) error {
	p, ctx := l.p, l.p.ctx
	if f.err != nil {
		return f.err
	}
	if l.send {
		if f.ev != nil {
			if err := f.ev.Wait(ctx); err != nil {
				return fmt.Errorf("copy to host for rank %d: %w", l.peer, err)
			}
			p.d.putEvent(f.ev)
		}
		if err := p.failed(); err != nil {
			return err // nothing goes on the wire for a call that has failed
		}
		p.mu.Lock()
		r := p.peers.Isend(l.peer, f.mem)
		p.mu.Unlock()
		return r.Wait(ctx)
	}
	if err := f.r.Wait(ctx); err != nil {
		return err
	}
	if f.slot == nil {
		return nil
	}
	s := p.ss.recv
	err := p.d.run(ctx, s, func() error { return s.CopyFromHost(f.buf, f.off, f.mem) })
	if err != nil {
		return fmt.Errorf("copy from rank %d to device: %w", l.peer, err)
	}
	return nil
}

// onDevice runs alg on the device buffer of v: alg gets a devPeers over p
// and a stand-in for the whole buffer.
func (c *Comm) onDevice(ctx context.Context, p *peers, v view, op reduceop.Op, alg func(dp *devPeers, buf []byte) error) error {
	d, err := c.shared.devs.get(v.dev.Device())
	if err != nil {
		return err
	}
	ss, err := d.streams()
	if err != nil {
		return err
	}
	if p.after != nil { // on a framework's stream (stream.go): after its earlier work
		for _, s := range []device.Stream{ss.send, ss.recv, ss.compute} {
			if err := s.WaitEvent(p.after); err != nil {
				return err
			}
		}
	}
	dp := newDevPeers(ctx, p, d, ss, v.dt, op)
	buf, err := dp.stand(v.dev, 0, v.bytes())
	if err == nil {
		err = alg(dp, buf)
	}
	dp.finish(err == nil)
	if err == nil {
		d.putStreams(ss) // every piece of its work was waited for
	} else {
		p.drain = func() { dp.drain(ss) }
	}
	return err
}

// drainMax bounds how long a failed call waits for its device work.
const drainMax = 5 * time.Second

// drain waits, after a failure and once the endpoint is closed (so that no
// lane waits on the wire any more), for the lanes and then for the call's
// streams: the device work of a failed call reads and writes the caller's
// buffers too, and the caller may free them when the call returns. Bounded
// by drainMax: a device that failed may never finish its work.
func (p *devPeers) drain(ss *streamSet) {
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(drainMax)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainMax)
	defer cancel()
	for _, s := range []device.Stream{ss.send, ss.recv, ss.compute} {
		s.Synchronize(ctx)
	}
}

// scale divides the elements of device memory b (a stand-in slice) by div
// on the compute stream, and waits.
func (p *devPeers) scale(b []byte, div int) error {
	if len(b) == 0 || div == 1 {
		return nil
	}
	buf, off, ok := p.where(b)
	if !ok {
		return fmt.Errorf("scale: host memory in a collective on device memory")
	}
	s := p.ss.compute
	return p.d.run(p.ctx, s, func() error { return s.Scale(buf, off, len(b)/p.dt.Size(), div) })
}

// useDevice puts k on the device data path of dev.
func (k *call) useDevice(dev device.Device) {
	k.chunk, k.dev = devChunk, dev
}

// sameDevice refuses a call whose two device buffers live on different
// devices.
func (c *Comm) sameDevice(op string, a, b view) error {
	if a.dev.Device() != b.dev.Device() {
		return invalid(op, c.rank, "send is on %v but recv on %v", a.dev.Device(), b.dev.Device())
	}
	return nil
}
