package ibfake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goccl/goccl/transport/ib"
)

// Fabric is an in-memory InfiniBand subnet: the devices opened through its
// Provider, their memory regions, completion queues and queue pairs. One
// mutex guards it all, so every work request is carried out whole, in the
// order posted, at the moment it is posted; its completions are queued then
// (and become visible to Poll after the fabric's CQ delay, if set).
type Fabric struct {
	mu      sync.Mutex
	nextLID uint16
	nextQPN uint32
	nextKey uint32
	devices map[string]*Device
	qps     map[qpAddr]*QP
	delay   time.Duration
	misuse  []string
	polls   int64
	mtus    map[string]ib.MTU
}

type qpAddr struct {
	lid uint16
	qpn uint32
}

// ErrGone is what calls on a crashed device's objects return.
var ErrGone = errors.New("ibfake: device gone (crashed)")

// New returns an empty fabric.
func New() *Fabric {
	return &Fabric{nextLID: 1, nextQPN: 0x100, nextKey: 0x1000,
		devices: map[string]*Device{}, qps: map[qpAddr]*QP{}}
}

// SetCQDelay makes every completion queued from now on invisible to Poll
// for d: a slow completion queue. The order of completions is kept.
func (f *Fabric) SetCQDelay(d time.Duration) {
	f.mu.Lock()
	f.delay = d
	f.mu.Unlock()
}

// Misuse lists the lifetime errors seen so far: an object destroyed
// twice, or a device closed while memory regions, queue pairs or
// completion queues of it were still alive (ibv_dealloc_pd and
// ibv_close_device would fail or leak there). A crashed device is exempt.
func (f *Fabric) Misuse() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.misuse...)
}

// Unclosed lists the devices opened and not closed (crashed ones count
// as closed).
func (f *Fabric) Unclosed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for name, d := range f.devices {
		if !d.closed && !d.crashed {
			out = append(out, name)
		}
	}
	return out
}

func (f *Fabric) misused(format string, args ...any) error {
	err := fmt.Errorf("ibfake: "+format, args...)
	f.misuse = append(f.misuse, err.Error())
	return err
}

// SetMTU sets the active MTU of the port of the device that will be
// opened under name (default 5, 4096 bytes).
func (f *Fabric) SetMTU(name string, m ib.MTU) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mtus == nil {
		f.mtus = map[string]ib.MTU{}
	}
	f.mtus[name] = m
}

// Polls is how many times any completion queue of the fabric was polled.
func (f *Fabric) Polls() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls
}

// Provider returns an ib.Provider whose Open makes a new device of the
// given name (an empty name gets "fakeN") with a port of its own LID, as if
// each rank were a host with one HCA.
func (f *Fabric) Provider() ib.Provider { return provider{f} }

type provider struct{ f *Fabric }

func (p provider) Open(name string, port, gidIndex int) (ib.Device, error) {
	f := p.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == "" {
		name = fmt.Sprintf("fake%d", len(f.devices))
	}
	if d := f.devices[name]; d != nil && !d.closed && !d.crashed {
		return nil, fmt.Errorf("ibfake: device %s is already open", name)
	}
	if port > 1 || gidIndex != 0 {
		return nil, fmt.Errorf("ibfake: device %s has no port %d or GID index %d", name, port, gidIndex)
	}
	d := &Device{f: f, name: name, lid: f.nextLID, mrs: map[uint32]*mr{}, mtu: 5}
	if m, ok := f.mtus[name]; ok {
		d.mtu = m
	}
	d.gid[0], d.gid[1] = 0xfe, 0x80
	d.gid[14], d.gid[15] = byte(d.lid>>8), byte(d.lid)
	f.nextLID++
	f.devices[name] = d
	return d, nil
}

// Device returns the device opened under name, or nil.
func (f *Fabric) Device(name string) *Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.devices[name]
}

// Device is a fake device context (ib.Device).
type Device struct {
	f       *Fabric
	name    string
	lid     uint16
	gid     [16]byte
	mtu     ib.MTU
	mrs     map[uint32]*mr
	qps     []*QP
	cqs     []*CQ
	closed  bool
	crashed bool
}

var _ ib.Device = (*Device)(nil)

type mr struct {
	d      *Device
	b      []byte
	base   uint64
	key    uint32
	access ib.Access
	gone   bool
}

func (d *Device) Name() string { return d.name }

func (d *Device) Port() ib.PortInfo {
	return ib.PortInfo{Num: 1, LID: d.lid, GID: d.gid, Active: true, MTU: d.mtu}
}

// Regions is the number of memory regions registered now.
func (d *Device) Regions() int {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	return len(d.mrs)
}

func (d *Device) check() error {
	switch {
	case d.crashed:
		return ErrGone
	case d.closed:
		return errors.New("ibfake: device closed")
	}
	return nil
}

func (d *Device) RegMR(b []byte, access ib.Access) (ib.MR, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if err := d.check(); err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("ibfake: register an empty region")
	}
	m := &mr{d: d, b: b, base: ib.AddrOf(b), key: d.f.nextKey, access: access}
	d.f.nextKey++
	d.mrs[m.key] = m
	return m, nil
}

func (m *mr) LKey() uint32 { return m.key }
func (m *mr) RKey() uint32 { return m.key }

func (m *mr) Dereg() error {
	m.d.f.mu.Lock()
	defer m.d.f.mu.Unlock()
	if m.gone {
		return m.d.f.misused("%s: region deregistered twice", m.d.name)
	}
	m.gone = true
	delete(m.d.mrs, m.key)
	return nil
}

// span returns the bytes [addr, addr+n) of the region keyed key, or nil.
func (d *Device) span(key uint32, addr uint64, n uint32, need ib.Access) ([]byte, bool) {
	m := d.mrs[key]
	if m == nil || m.access&need != need || addr < m.base || addr+uint64(n) > m.base+uint64(len(m.b)) {
		return nil, false
	}
	off := addr - m.base
	return m.b[off : off+uint64(n)], true
}

func (d *Device) CreateCQ(entries int) (ib.CQ, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if err := d.check(); err != nil {
		return nil, err
	}
	cq := &CQ{d: d, size: entries, ev: make(chan struct{}, 1), done: make(chan struct{})}
	d.cqs = append(d.cqs, cq)
	return cq, nil
}

func (d *Device) CreateQP(cq ib.CQ, caps ib.QPCaps) (ib.QP, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if err := d.check(); err != nil {
		return nil, err
	}
	c, ok := cq.(*CQ)
	if !ok || c.d != d {
		return nil, errors.New("ibfake: completion queue of another device")
	}
	q := &QP{d: d, cq: c, num: d.f.nextQPN, caps: caps}
	d.f.nextQPN++
	d.f.qps[qpAddr{d.lid, q.num}] = q
	d.qps = append(d.qps, q)
	return q, nil
}

func (d *Device) Close() error {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.closed {
		return d.f.misused("%s: device closed twice", d.name)
	}
	d.closed = true
	if !d.crashed {
		live := 0
		for _, q := range d.qps {
			if !q.gone {
				live++
			}
		}
		cqs := 0
		for _, c := range d.cqs {
			if !c.closed {
				cqs++
			}
		}
		if len(d.mrs) > 0 || live > 0 || cqs > 0 {
			d.f.misused("%s: closed with %d memory regions, %d queue pairs and %d completion queues alive", d.name, len(d.mrs), live, cqs)
		}
	}
	for _, q := range d.qps {
		delete(d.f.qps, qpAddr{d.lid, q.num})
	}
	return nil
}

// Crash makes the device vanish as if its process died: its queue pairs
// stop answering (a peer's next work request towards them completes with
// StatusRetryExceeded) and its own objects fail every call with ErrGone.
func (d *Device) Crash() {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.crashed = true
	for _, q := range d.qps {
		delete(d.f.qps, qpAddr{d.lid, q.num})
	}
	for _, c := range d.cqs {
		c.signal()
	}
}

// Break moves every live queue pair of d to the error state at once, as a
// fatal error of the adapter would (see QP.Break): no queue pair of d can
// carry another request while the others are being broken.
func (d *Device) Break() {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	for _, q := range d.qps {
		if !q.gone {
			q.toError()
		}
	}
}

// QPTo returns the queue pair of d connected to the device named peer, or
// nil.
func (d *Device) QPTo(peer string) *QP {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	p := d.f.devices[peer]
	if p == nil {
		return nil
	}
	for _, q := range d.qps {
		if q.state >= stateRTR && q.remote.lid == p.lid {
			return q
		}
	}
	return nil
}

// CQ is a fake completion queue (ib.CQ).
type CQ struct {
	d       *Device
	size    int
	entries []entry
	armed   bool
	ev      chan struct{}
	done    chan struct{}
	closed  bool
	timer   *time.Timer
	// Overflowed is set when more completions were queued than the
	// queue's size (a real CQ would go to error).
	overflowed bool
}

type entry struct {
	wc      ib.WC
	visible time.Time
}

var _ ib.CQ = (*CQ)(nil)

// push queues a completion; the fabric lock is held.
func (c *CQ) push(wc ib.WC) {
	if c.closed {
		return
	}
	e := entry{wc: wc}
	if d := c.d.f.delay; d > 0 {
		e.visible = time.Now().Add(d)
	}
	c.entries = append(c.entries, e)
	if len(c.entries) > c.size {
		c.overflowed = true
	}
	c.notify()
}

// notify signals an armed queue once its first completion is visible.
func (c *CQ) notify() {
	if !c.armed || len(c.entries) == 0 {
		return
	}
	if wait := time.Until(c.entries[0].visible); wait > 0 {
		if c.timer == nil {
			c.timer = time.AfterFunc(wait, func() {
				c.d.f.mu.Lock()
				defer c.d.f.mu.Unlock()
				c.timer = nil
				c.notify()
			})
		}
		return
	}
	c.armed = false
	c.signal()
}

func (c *CQ) signal() {
	select {
	case c.ev <- struct{}{}:
	default:
	}
}

// Overflowed reports whether more completions were ever queued than fit.
func (c *CQ) Overflowed() bool {
	c.d.f.mu.Lock()
	defer c.d.f.mu.Unlock()
	return c.overflowed
}

func (c *CQ) Poll(wc []ib.WC) (int, error) {
	c.d.f.mu.Lock()
	defer c.d.f.mu.Unlock()
	c.d.f.polls++
	if c.d.crashed {
		return 0, ErrGone
	}
	if c.closed {
		return 0, errors.New("ibfake: poll a destroyed completion queue")
	}
	now := time.Now()
	n := 0
	for n < len(wc) && n < len(c.entries) && !c.entries[n].visible.After(now) {
		wc[n] = c.entries[n].wc
		n++
	}
	c.entries = c.entries[n:]
	if len(c.entries) == 0 {
		c.entries = nil
	}
	return n, nil
}

func (c *CQ) Arm() error {
	c.d.f.mu.Lock()
	defer c.d.f.mu.Unlock()
	if c.closed {
		return errors.New("ibfake: arm a destroyed completion queue")
	}
	c.armed = true
	c.notify()
	return nil
}

func (c *CQ) Wait(ctx context.Context) error {
	select {
	case <-c.ev:
		c.d.f.mu.Lock()
		defer c.d.f.mu.Unlock()
		if c.d.crashed {
			return ErrGone
		}
		return nil
	case <-c.done:
		return errors.New("ibfake: completion queue destroyed")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *CQ) Close() error {
	c.d.f.mu.Lock()
	defer c.d.f.mu.Unlock()
	if c.closed {
		return c.d.f.misused("%s: completion queue destroyed twice", c.d.name)
	}
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	close(c.done)
	return nil
}

type qpState int

const (
	stateReset qpState = iota
	stateInit
	stateRTR
	stateRTS
	stateError
)

// QP is a fake reliable-connected queue pair (ib.QP).
type QP struct {
	d        *Device
	cq       *CQ
	num      uint32
	caps     ib.QPCaps
	state    qpState
	remote   qpAddr
	recvs    []ib.RecvWR
	failNext ib.Status
	gone     bool
	attr     ib.RTSAttr
	rtr      ib.RTRAttr
}

var _ ib.QP = (*QP)(nil)

func (q *QP) Num() uint32 { return q.num }

// RTR returns the attributes the queue pair was moved to RTR with.
func (q *QP) RTR() ib.RTRAttr {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	return q.rtr
}

// RTS returns the attributes the queue pair was moved to RTS with.
func (q *QP) RTS() ib.RTSAttr {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	return q.attr
}

func (q *QP) modify(from, to qpState) error {
	if q.d.crashed {
		return ErrGone
	}
	if q.state != from {
		return fmt.Errorf("ibfake: QP %#x: modify to state %d from state %d, want %d", q.num, to, q.state, from)
	}
	q.state = to
	return nil
}

func (q *QP) Init(port int, access ib.Access) error {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	if port != 1 {
		return fmt.Errorf("ibfake: QP %#x: port %d", q.num, port)
	}
	return q.modify(stateReset, stateInit)
}

func (q *QP) ReadyToReceive(a ib.RTRAttr) error {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	if a.MTU < 1 || a.MTU > 5 {
		return fmt.Errorf("ibfake: QP %#x: bad path MTU %d", q.num, a.MTU)
	}
	if err := q.modify(stateInit, stateRTR); err != nil {
		return err
	}
	q.remote = qpAddr{a.RemoteLID, a.RemoteQPN}
	q.rtr = a
	return nil
}

func (q *QP) ReadyToSend(a ib.RTSAttr) error {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	if a.RetryCnt > 7 || a.RNRRetry > 7 || a.Timeout > 31 {
		return fmt.Errorf("ibfake: QP %#x: retry count %d, RNR retry %d, timeout %d out of range", q.num, a.RetryCnt, a.RNRRetry, a.Timeout)
	}
	if err := q.modify(stateRTR, stateRTS); err != nil {
		return err
	}
	q.attr = a
	return nil
}

// Break moves the queue pair to the error state, as a fatal local error
// would: its posted receives complete with StatusFlushed, later work
// requests too, and the remote side's next request towards it completes
// with StatusRetryExceeded.
func (q *QP) Break() {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	q.toError()
}

// FailNext makes the next send work request posted on q complete with
// status instead of being carried out, and then q go to the error state
// (as a real error completion does).
func (q *QP) FailNext(status ib.Status) {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	q.failNext = status
}

// toError flushes the posted receives; the fabric lock is held.
func (q *QP) toError() {
	if q.state == stateError {
		return
	}
	q.state = stateError
	for _, r := range q.recvs {
		q.cq.push(ib.WC{ID: r.ID, Status: ib.StatusFlushed, Op: ib.WCRecv, QPN: q.num})
	}
	q.recvs = nil
}

func (q *QP) SetError() error {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	if q.d.crashed {
		return ErrGone
	}
	q.toError()
	return nil
}

func (q *QP) PostRecv(wr *ib.RecvWR) error {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	if q.d.crashed || q.gone {
		return ErrGone
	}
	switch q.state {
	case stateReset:
		return fmt.Errorf("ibfake: QP %#x: post receive in RESET", q.num)
	case stateError:
		q.cq.push(ib.WC{ID: wr.ID, Status: ib.StatusFlushed, Op: ib.WCRecv, QPN: q.num})
		return nil
	}
	if len(q.recvs) >= q.caps.RecvDepth {
		return fmt.Errorf("ibfake: QP %#x: receive queue full (%d)", q.num, q.caps.RecvDepth)
	}
	if wr.Len > 0 {
		if _, ok := q.d.span(wr.LKey, wr.Addr, wr.Len, ib.AccessLocalWrite); !ok {
			return fmt.Errorf("ibfake: QP %#x: receive buffer outside its region", q.num)
		}
	}
	q.recvs = append(q.recvs, *wr)
	return nil
}

func wcOp(op ib.Opcode) ib.WCOpcode {
	switch op {
	case ib.OpSend:
		return ib.WCSend
	case ib.OpRead:
		return ib.WCRead
	}
	return ib.WCWrite
}

func (q *QP) PostSend(wr *ib.SendWR) error {
	f := q.d.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.d.crashed || q.gone {
		return ErrGone
	}
	switch q.state {
	case stateReset, stateInit, stateRTR:
		return fmt.Errorf("ibfake: QP %#x: post send before RTS", q.num)
	case stateError:
		q.cq.push(ib.WC{ID: wr.ID, Status: ib.StatusFlushed, Op: wcOp(wr.Op), QPN: q.num})
		return nil
	}
	status := q.carry(wr)
	if status != ib.StatusSuccess {
		q.cq.push(ib.WC{ID: wr.ID, Status: status, Op: wcOp(wr.Op), QPN: q.num})
		q.toError()
		return nil
	}
	if wr.Signaled {
		q.cq.push(ib.WC{ID: wr.ID, Op: wcOp(wr.Op), QPN: q.num, Len: wr.Len})
	}
	return nil
}

// carry performs wr and returns the sender's completion status.
func (q *QP) carry(wr *ib.SendWR) ib.Status {
	if s := q.failNext; s != ib.StatusSuccess {
		q.failNext = ib.StatusSuccess
		return s
	}
	r := q.d.f.qps[q.remote]
	if r == nil || r.state == stateError || r.state < stateRTR || r.remote != (qpAddr{q.d.lid, q.num}) {
		return ib.StatusRetryExceeded
	}
	var src []byte
	if wr.Len > 0 && wr.Op != ib.OpRead {
		var ok bool
		if src, ok = q.d.span(wr.LKey, wr.Addr, wr.Len, 0); !ok {
			return ib.StatusLocProtErr
		}
	}
	switch wr.Op {
	case ib.OpSend:
		if len(r.recvs) == 0 {
			return ib.StatusRNRRetryExc // the transport's credits must prevent this
		}
		rv := r.recvs[0]
		r.recvs = r.recvs[1:]
		if wr.Len > rv.Len {
			r.cq.push(ib.WC{ID: rv.ID, Status: ib.StatusLocLenErr, Op: ib.WCRecv, QPN: r.num})
			r.toError()
			return ib.StatusRemOpErr
		}
		if wr.Len > 0 {
			dst, _ := r.d.span(rv.LKey, rv.Addr, wr.Len, ib.AccessLocalWrite)
			copy(dst, src)
		}
		r.cq.push(ib.WC{ID: rv.ID, Op: ib.WCRecv, Len: wr.Len, QPN: r.num})
	case ib.OpWrite, ib.OpWriteImm:
		if wr.Op == ib.OpWriteImm && len(r.recvs) == 0 {
			return ib.StatusRNRRetryExc
		}
		if wr.Len > 0 {
			dst, ok := r.d.span(wr.RKey, wr.RemoteAddr, wr.Len, ib.AccessRemoteWrite)
			if !ok {
				r.toError()
				return ib.StatusRemAccessErr
			}
			copy(dst, src)
		}
		if wr.Op == ib.OpWriteImm {
			rv := r.recvs[0]
			r.recvs = r.recvs[1:]
			r.cq.push(ib.WC{ID: rv.ID, Op: ib.WCRecvImm, Len: wr.Len, Imm: wr.Imm, QPN: r.num})
		}
	case ib.OpRead:
		if wr.Len > 0 {
			from, ok := r.d.span(wr.RKey, wr.RemoteAddr, wr.Len, ib.AccessRemoteRead)
			if !ok {
				r.toError()
				return ib.StatusRemAccessErr
			}
			dst, ok := q.d.span(wr.LKey, wr.Addr, wr.Len, ib.AccessLocalWrite)
			if !ok {
				return ib.StatusLocProtErr
			}
			copy(dst, from)
		}
	default:
		return ib.StatusLocQPOpErr
	}
	return ib.StatusSuccess
}

func (q *QP) Close() error {
	q.d.f.mu.Lock()
	defer q.d.f.mu.Unlock()
	if q.gone {
		return q.d.f.misused("%s: QP %#x destroyed twice", q.d.name, q.num)
	}
	q.gone = true
	q.recvs = nil
	if q.state != stateError {
		q.state = stateError
	}
	delete(q.d.f.qps, qpAddr{q.d.lid, q.num})
	return nil
}
