package devpath

import (
	"context"
	"fmt"
	"math/bits"
	"sync"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// Chunk is the most bytes of one message of the data path on the wire,
// and the size of a pinned slot. Both ends of a message must cut it alike:
// goccl puts it in the call's fingerprint.
const Chunk = 1 << 20

// laneSlots bounds the chunks in flight per lane.
const laneSlots = 4

// Ctx is what a communicator keeps for one device: pools of stream
// sets, pinned slots, events and scratch memory. It is made on the first
// collective on the device and freed by Close.
type Ctx struct {
	dev   device.Device
	noIPC bool // GOCCL_DEVICE_IPC=0: offer no handles, refuse the peers' (ipc.go)

	mu      sync.Mutex
	sets    []*streamSet                   // free stream sets
	allSets []*streamSet                   // every stream set, for Close
	slots   []device.Host                  // free pinned slots of Chunk bytes
	all     []device.Host                  // every slot, for Close
	events  []device.Event                 // free events
	scratch map[scratchKey][]device.Buffer // free device scratch by dtype and size class
	allScr  []device.Buffer                // every scratch buffer, for Close
	wins    map[int][][]byte               // free stand-ins by size class
	bounce  map[int][]device.Host          // free pinned staging by size class (staged collectives)
	allBnc  []device.Host                  // every staging buffer, for Close

	ipcRefused map[int]bool         // job ranks that refused this rank's IPC handles (ipc.go)
	notes      map[ipcNote]int      // IPC events per peer, logged once (ipc.go)
	ipcOpen    map[string]*ipcEntry // peers' handles kept open (ipc.go)
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

// Devices is a communicator's Ctx per device, shared by its groups. The
// zero Devices is ready to use.
type Devices struct {
	mu sync.Mutex
	m  map[device.Device]*Ctx
}

// Get returns the Ctx of dev, made on the first call for dev: noIPC
// (GOCCL_DEVICE_IPC=0) makes it offer no IPC handles and refuse its
// peers'.
func (ds *Devices) Get(dev device.Device, noIPC bool) (*Ctx, error) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.m[dev]; d != nil {
		return d, nil
	}
	d := &Ctx{dev: dev, noIPC: noIPC, scratch: map[scratchKey][]device.Buffer{}, wins: map[int][][]byte{}, bounce: map[int][]device.Host{}}
	if ds.m == nil {
		ds.m = map[device.Device]*Ctx{}
	}
	ds.m[dev] = d
	return d, nil
}

// Close frees every device's resources (Comm.Close).
func (ds *Devices) Close() {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for _, d := range ds.m {
		d.close()
	}
	ds.m = nil
}

func (d *Ctx) close() {
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
func (d *Ctx) streams() (*streamSet, error) {
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
func (d *Ctx) putStreams(ss *streamSet) {
	d.mu.Lock()
	d.sets = append(d.sets, ss)
	d.mu.Unlock()
}

func sizeClass(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// slot returns a free pinned slot of Chunk bytes.
func (d *Ctx) slot() ([]byte, device.Host, error) {
	d.mu.Lock()
	if k := len(d.slots); k > 0 {
		h := d.slots[k-1]
		d.slots = d.slots[:k-1]
		d.mu.Unlock()
		return h.Bytes(), h, nil
	}
	d.mu.Unlock()
	h, err := d.dev.AllocHost(Chunk)
	if err != nil {
		return nil, nil, fmt.Errorf("%v: pinned slot: %w", d.dev, err)
	}
	d.mu.Lock()
	d.all = append(d.all, h)
	d.mu.Unlock()
	return h.Bytes(), h, nil
}

func (d *Ctx) putSlot(h device.Host) {
	d.mu.Lock()
	d.slots = append(d.slots, h)
	d.mu.Unlock()
}

// Event returns an event from the pool: goccl's StreamComm records one on
// a framework's stream and hands it to Run as Call.After.
func (d *Ctx) Event() (device.Event, error) {
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

// PutEvent returns an event whose last recorded work is done.
func (d *Ctx) PutEvent(e device.Event) {
	d.mu.Lock()
	d.events = append(d.events, e)
	d.mu.Unlock()
}

// run enqueues work on s, records an event after it and waits for it.
func (d *Ctx) run(ctx context.Context, s device.Stream, work func() error) error {
	if err := work(); err != nil {
		return err
	}
	e, err := d.Event()
	if err != nil {
		return err
	}
	if err := s.Record(e); err != nil {
		return err
	}
	if err := e.Wait(ctx); err != nil {
		return err // e may still complete later: do not reuse it
	}
	d.PutEvent(e)
	return nil
}

// scratchBuf returns device memory for n bytes of dt.
func (d *Ctx) scratchBuf(dt reduceop.DType, n int) (device.Buffer, error) {
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

func (d *Ctx) putScratch(dt reduceop.DType, n int, b device.Buffer) {
	key := scratchKey{dt, sizeClass(n)}
	d.mu.Lock()
	d.scratch[key] = append(d.scratch[key], b)
	d.mu.Unlock()
}

// window returns a stand-in of n bytes (see reserve).
func (d *Ctx) window(n int) ([]byte, error) {
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

func (d *Ctx) putWindow(w []byte) {
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
func (d *Ctx) pinned(n int) (device.Host, error) {
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

func (d *Ctx) putPinned(h device.Host) {
	class := sizeClass(len(h.Bytes()))
	d.mu.Lock()
	d.bounce[class] = append(d.bounce[class], h)
	d.mu.Unlock()
}

// ToHost copies len(dst) bytes of b from byte off into dst (any host
// memory) through pinned staging, and waits: for the collectives that
// still stage a whole buffer.
func (d *Ctx) ToHost(ctx context.Context, dst []byte, b device.Buffer, off int) error {
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

// FromHost copies src into b from byte off through pinned staging, and
// waits.
func (d *Ctx) FromHost(ctx context.Context, b device.Buffer, off int, src []byte) error {
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
