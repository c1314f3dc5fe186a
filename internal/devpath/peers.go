package devpath

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// region is a stand-in and the device memory it stands for.
type region struct {
	win []byte
	buf device.Buffer
	off int // byte offset of win[0] in buf
}

// Peers is the algo.Peers of a collective on device memory: the
// algorithm's buffers are stand-ins (Stand, GetScratch), and every byte
// moves through its methods. It is an algo.Scratcher and an algo.Copier,
// and keeps the algorithms' default segments (algo.Segmenter).
type Peers struct {
	link  Link
	ctx   context.Context
	d     *Ctx
	ss    *streamSet
	dt    reduceop.DType
	op    reduceop.Op
	after device.Event // on a framework's stream: the event the streams wait on

	mu      sync.Mutex // guards everything below, and calls into link's Isend and Irecv
	regions []region
	lanes   map[laneKey]*lane
	scr     map[uintptr]device.Buffer // scratch stand-in -> its memory
	dead    chan struct{}             // closed when a lane fails or the call ends
	err     error
	wg      sync.WaitGroup
}

// Rank is this rank's index in the group.
func (p *Peers) Rank() int { return p.link.Rank() }

// Size is the number of ranks in the group.
func (p *Peers) Size() int { return p.link.Size() }

// ElemSize is the size of the call's dtype.
func (p *Peers) ElemSize() int { return p.dt.Size() }

// SegmentBytes keeps a device call's segments at the algorithms' default:
// its messages are cut into chunks of their own (Chunk).
func (p *Peers) SegmentBytes() int { return 0 }

type laneKey struct {
	peer int
	send bool
}

var (
	_ algo.Peers     = (*Peers)(nil)
	_ algo.Scratcher = (*Peers)(nil)
	_ algo.Copier    = (*Peers)(nil)
	_ algo.Segmenter = (*Peers)(nil)
)

func newPeers(ctx context.Context, k Call, d *Ctx, ss *streamSet) *Peers {
	return &Peers{link: k.Link, ctx: ctx, d: d, ss: ss, dt: k.DType, op: k.Op, after: k.After,
		lanes: map[laneKey]*lane{}, scr: map[uintptr]device.Buffer{}, dead: make(chan struct{})}
}

// Stand returns a stand-in for n bytes of buf from byte off, for the
// call's other device buffers (the send buffer of a call with two).
func (p *Peers) Stand(buf device.Buffer, off, n int) ([]byte, error) {
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
func (p *Peers) where(b []byte) (buf device.Buffer, off int, ok bool) {
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

// GetScratch returns a stand-in for n bytes of device scratch memory of
// the call's dtype (algo.Scratcher). A failure to get it fails the call.
func (p *Peers) GetScratch(n int) []byte {
	b, err := p.d.scratchBuf(p.dt, n)
	if err != nil {
		p.fail(err)
		return make([]byte, n) // host memory: the next device operation on it fails
	}
	w, err := p.Stand(b, 0, n)
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

// PutScratch returns scratch from GetScratch to the pool.
func (p *Peers) PutScratch(w []byte) {
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
func (p *Peers) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		close(p.dead)
	}
}

func (p *Peers) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// device returns the device memory behind dst and src, or an error naming
// the operation when either is host memory.
func (p *Peers) pair(op string, dst, src []byte) (db device.Buffer, doff int, sb device.Buffer, soff int, err error) {
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

// Reduce computes dst op= src on the device, both stand-in slices, and
// waits for the kernel.
func (p *Peers) Reduce(dst, src []byte) error {
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

// Copy copies src to dst on the device, both stand-in slices, and waits
// (algo.Copier).
func (p *Peers) Copy(dst, src []byte) error {
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

// Isend sends b, a stand-in slice or host memory, to rank to, chunk by
// chunk through the lane to it (or by IPC).
func (p *Peers) Isend(to int, b []byte) algo.Request { return p.enqueue(to, true, b) }

// Irecv receives into b, a stand-in slice or host memory, from rank from.
func (p *Peers) Irecv(from int, b []byte) algo.Request { return p.enqueue(from, false, b) }

// enqueue cuts b into chunks and queues them on the lane to or from peer.
func (p *Peers) enqueue(peer int, send bool, b []byte) algo.Request {
	r := &request{done: make(chan struct{})}
	buf, off, onDev := p.where(b)
	ipc := p.useIPC(peer, onDev, len(b))
	n := max(1, (len(b)+Chunk-1)/Chunk)
	if ipc {
		n = 1 // one item: the lane runs it whole (ipc.go)
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
		lo, hi := i*Chunk, min((i+1)*Chunk, len(b))
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
func (p *Peers) finish(ok bool) {
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

// Call is what Run needs of one collective besides its buffer.
type Call struct {
	Link  Link
	DType reduceop.DType // the buffers' dtype
	Op    reduceop.Op    // the reduction, for Reduce; any for a collective without one
	After device.Event   // nil, or an event the call's streams wait on before any work (a framework's stream)
}

// Run runs alg on n bytes of the device buffer buf from byte 0: alg gets a
// Peers for the call and a stand-in for those bytes. On success every piece
// of the call's device work has been waited for. On failure drain is
// non-nil: the caller calls it once its endpoint is closed, so that no
// lane waits on the wire any more, and it waits (bounded) for the call's
// device work, which reads and writes the caller's buffers.
func (d *Ctx) Run(ctx context.Context, k Call, buf device.Buffer, n int, alg func(p *Peers, buf []byte) error) (drain func(), err error) {
	ss, err := d.streams()
	if err != nil {
		return nil, err
	}
	if k.After != nil {
		for _, s := range []device.Stream{ss.send, ss.recv, ss.compute} {
			if err := s.WaitEvent(k.After); err != nil {
				return nil, err
			}
		}
	}
	p := newPeers(ctx, k, d, ss)
	w, err := p.Stand(buf, 0, n)
	if err == nil {
		err = alg(p, w)
	}
	p.finish(err == nil)
	if err == nil {
		d.putStreams(ss) // every piece of its work was waited for
		return nil, nil
	}
	return func() { p.drain(ss) }, err
}

// drainMax bounds how long a failed call waits for its device work.
const drainMax = 5 * time.Second

// drain waits, after a failure and once the endpoint is closed (so that no
// lane waits on the wire any more), for the lanes and then for the call's
// streams: the device work of a failed call reads and writes the caller's
// buffers too, and the caller may free them when the call returns. Bounded
// by drainMax: a device that failed may never finish its work.
func (p *Peers) drain(ss *streamSet) {
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

// Scale divides the elements of device memory b (a stand-in slice) by div
// on the compute stream, and waits: the last step of Avg.
func (p *Peers) Scale(b []byte, div int) error {
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
