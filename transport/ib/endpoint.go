package ib

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/transport"
)

// Endpoint is one rank's connection to every other rank over
// reliable-connected queue pairs. It implements transport.Endpoint,
// transport.PeerLossNotifier and transport.StrayReporter.
type Endpoint struct {
	cfg   *Config
	dev   Device
	cq    CQ
	m     *transport.Matcher
	peers []*peer // nil at this rank's own index
	cache *regCache

	ctx    context.Context // ends at Close: stops the progress goroutine
	cancel context.CancelFunc
	done   chan struct{} // closed when the progress goroutine returns

	onLoss    atomic.Pointer[func(*transport.PeerError)]
	closing   atomic.Bool
	closeOnce sync.Once
	started   bool
}

var (
	_ transport.Endpoint         = (*Endpoint)(nil)
	_ transport.PeerLossNotifier = (*Endpoint)(nil)
	_ transport.StrayReporter    = (*Endpoint)(nil)
)

// Work request ids: peer << 48 | what << 40 | index.
const (
	wrRecv   = 1 // index: receive slot
	wrSend   = 2 // index: send slot
	wrWrite  = 3 // index: the send's id
	wrBeat   = 4 // heartbeat
	wrChunk  = 5 // index: the send's id; a write before the last of a long message
	wrRead   = 6 // index: the receive's id; the last read of a rendezvous by READ
	wrRChunk = 7 // a read before the last
)

// maxWrite is the most one RDMA WRITE or READ carries (adapters take at
// most 2 GiB per work request): a longer message goes as several, the
// last write with the immediate. Tests lower it.
var maxWrite uint64 = 1 << 30

// writes is how many work requests a rendezvous write or read of n bytes
// takes.
func writes(n uint64) int { return int(max((n+maxWrite-1)/maxWrite, 1)) }

func wrID(peer, what int, index uint64) uint64 {
	return uint64(peer)<<48 | uint64(what)<<40 | index&(1<<40-1)
}

func splitID(id uint64) (peer, what int, index uint64) {
	return int(id >> 48), int(id >> 40 & 0xff), id & (1<<40 - 1)
}

// peer is the link to one remote rank: its queue pair, the receive and
// send slots, credits, and the rendezvous in flight. mu guards everything
// below it; the progress goroutine and Isend both take it.
type peer struct {
	e    *Endpoint
	rank int
	qp   QP
	psn  uint32

	recvSlab, sendSlab []byte
	recvMR, sendMR     MR

	mu       sync.Mutex
	consumed uint64 // messages consumed from the peer (receive slots reposted)
	reported uint64 // consumed as last told to the peer
	sent     uint64 // messages sent that consume a receive slot of the peer
	acked    uint64 // the peer's consumed count, as last heard
	sqOut    int    // send work requests not yet completed
	free     []int  // free send slots
	queue    []*out // messages waiting for a credit, a slot or room in the send queue
	nextSend uint64
	sends    map[uint64]*rdvSend
	nextRecv uint64
	recvs    map[uint64]*rdvRecv
	blocked  map[transport.Tag][]held // tags held behind an unexpected rendezvous
	beatOut  bool
	byeID    uint64               // the goodbye's work request, 0 if none
	lost     *transport.PeerError // a loss to report once mu is released
	err      error                // the link failed (or Close ran): set once
}

// out is a message waiting to be posted.
type out struct {
	h       header
	payload []byte         // eager
	req     *transport.Req // eager, queued: completes once copied into a slot
	write   *rdvSend       // the rendezvous write with immediate
	read    *rdvRecv       // the rendezvous read (no credit needed)
	waddr   uint64         // the remote buffer written or read
	wrkey   uint32
	reserve bool // may take the last credit (credit returns, goodbye)
}

type rdvSend struct {
	req *transport.Req
	buf []byte
	reg *regEntry
}

type rdvRecv struct {
	id  uint64 // the receive's id
	tag transport.Tag
	n   int                   // the message's length
	dst []byte                // the bytes to fill: buf or the posted buffer's first min(n, len) bytes
	snd uint64                // the send's id at the peer (read: the FIN names it)
	pr  *transport.PostedRecv // the receive it lands in, or nil:
	buf []byte                // a pooled buffer for the unexpected queue
	reg *regEntry
}

// held is a message that arrived behind an unexpected rendezvous of the
// same tag and waits for it, so the tag's order is kept.
type held struct {
	data []byte  // eager: a pooled copy
	rts  *header // or a rendezvous announcement
}

func newEndpoint(cfg *Config, dev Device) (*Endpoint, error) {
	e := &Endpoint{cfg: cfg, dev: dev, m: transport.NewMatcher(cfg.Size), peers: make([]*peer, cfg.Size),
		cache: newRegCache(dev, cfg.RegCacheBytes), done: make(chan struct{})}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if cfg.Size == 1 {
		return e, nil
	}
	pi := dev.Port()
	if !pi.Active {
		return e.undo(fmt.Errorf("device %s port %d is not active", dev.Name(), pi.Num))
	}
	r, s := cfg.RecvDepth, cfg.SlotSize
	cq, err := dev.CreateCQ((cfg.Size-1)*(e.sqDepth()+r) + 16)
	if err != nil {
		return e.undo(fmt.Errorf("create completion queue: %w", err))
	}
	e.cq = cq
	for rank := range cfg.Size {
		if rank == cfg.Rank {
			continue
		}
		p := &peer{e: e, rank: rank, sends: map[uint64]*rdvSend{}, recvs: map[uint64]*rdvRecv{},
			blocked: map[transport.Tag][]held{}, nextSend: 1, nextRecv: 1}
		e.peers[rank] = p
		if p.qp, err = dev.CreateQP(cq, QPCaps{SendDepth: e.sqDepth(), RecvDepth: r}); err != nil {
			return e.undo(fmt.Errorf("create queue pair for rank %d: %w", rank, err))
		}
		if err := p.qp.Init(pi.Num, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead); err != nil {
			return e.undo(fmt.Errorf("queue pair for rank %d to INIT: %w", rank, err))
		}
		p.recvSlab, p.sendSlab = make([]byte, r*s), make([]byte, r*s)
		if p.recvMR, err = dev.RegMR(p.recvSlab, AccessLocalWrite); err != nil {
			return e.undo(fmt.Errorf("register receive slots: %w", err))
		}
		if p.sendMR, err = dev.RegMR(p.sendSlab, AccessLocalWrite); err != nil {
			return e.undo(fmt.Errorf("register send slots: %w", err))
		}
		for i := range r {
			p.free = append(p.free, i)
			if err := p.postRecv(i); err != nil {
				return e.undo(err)
			}
		}
	}
	return e, nil
}

// undo frees what newEndpoint made, the device included.
func (e *Endpoint) undo(err error) (*Endpoint, error) {
	e.release()
	return nil, err
}

// sqDepth is each queue pair's send queue depth: a message per slot, as
// many rendezvous writes, and a heartbeat.
func (e *Endpoint) sqDepth() int { return 2*e.cfg.RecvDepth + 4 }

// start launches the progress goroutine.
func (e *Endpoint) start() {
	e.started = true
	if e.cq == nil {
		close(e.done)
		return
	}
	go e.progress()
}

// Rank is this endpoint's rank.
func (e *Endpoint) Rank() int { return e.cfg.Rank }

// Size is the number of ranks.
func (e *Endpoint) Size() int { return e.cfg.Size }

// OnPeerLoss registers f, called once for each peer whose link fails: an
// error completion on its queue pair (retry exceeded, a queue pair moved
// to the error state, a remote access error), a failed post, or a peer
// that answers no heartbeat. A peer's goodbye (its Close) and this
// endpoint's own Close are not reported.
func (e *Endpoint) OnPeerLoss(f func(*transport.PeerError)) { e.onLoss.Store(&f) }

// OnStray sets the test for finished tags and the report of strays.
func (e *Endpoint) OnStray(finished func(transport.Tag) bool, report func(from int, tag transport.Tag, head []byte)) {
	e.m.SetStray(finished, report)
}

// Retire drops and reports the messages queued under tag.
func (e *Endpoint) Retire(tag transport.Tag) { e.m.Retire(tag) }

// RegCache returns the registration cache's counters.
func (e *Endpoint) RegCache() CacheStats { return e.cache.snapshot() }

// Forget deregisters the buffer starting at b's first byte, if the
// registration cache holds it (now, or when the operation using it
// completes), and lets the cache's reference to it go. A program that
// drops a large buffer can call it so the memory is freed before the
// cache would evict it.
func (e *Endpoint) Forget(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	return e.cache.forget(b)
}

// Irecv receives the next message from rank from under tag into b.
func (e *Endpoint) Irecv(from int, tag transport.Tag, b []byte) transport.Request {
	if e.closing.Load() {
		return transport.Completed(transport.ErrClosed)
	}
	return e.m.Post(from, tag, b)
}

// Isend sends b to rank to under tag. A message of at most SlotSize-48
// bytes is copied into a registered slot and its request completes at
// once (or once a credit frees its turn); a larger one is announced, then
// written where the peer says (or, with Config.RendezvousRead, read by the
// peer) straight into its receive buffer, and its request completes when
// the data is there. b must not change until then.
func (e *Endpoint) Isend(to int, tag transport.Tag, b []byte) transport.Request {
	if err := transport.CheckPeer("send", to, e.cfg.Size); err != nil {
		return transport.Completed(err)
	}
	if e.closing.Load() {
		return transport.Completed(transport.ErrClosed)
	}
	if to == e.cfg.Rank {
		if err := e.m.Deliver(to, tag, b); err != nil {
			return transport.Completed(err)
		}
		return transport.Completed(nil)
	}
	p := e.peers[to]
	p.mu.Lock()
	if p.err != nil {
		err := p.sendErr()
		p.mu.Unlock()
		return transport.Completed(err)
	}
	var req transport.Request
	if len(b) <= e.cfg.SlotSize-headerLen {
		o := &out{h: header{kind: kindEager, tag: uint64(tag), n: uint64(len(b))}, payload: b}
		if len(p.queue) == 0 && p.canPost(o) {
			req = transport.Completed(nil)
			if err := p.post(o); err != nil {
				req = p.failedPost(err)
			}
		} else {
			r := transport.NewRequest()
			o.req, req = r, r
			p.queue = append(p.queue, o)
		}
	} else {
		if int64(len(b)) > e.cfg.MaxMessage {
			p.mu.Unlock()
			return transport.Completed(&transport.PeerError{Op: "send", Peer: to,
				Err: fmt.Errorf("message of %d bytes over the limit of %d (Config.MaxMessage)", len(b), e.cfg.MaxMessage)})
		}
		reg, err := e.cache.get(b)
		if err != nil {
			p.mu.Unlock()
			return transport.Completed(&transport.PeerError{Op: "send", Peer: to, Err: err})
		}
		r := transport.NewRequest()
		id := p.nextSend
		p.nextSend++
		p.sends[id] = &rdvSend{req: r, buf: b, reg: reg}
		req = r
		h := header{kind: kindRTS, tag: uint64(tag), n: uint64(len(b)), id: id}
		if e.cfg.RendezvousRead {
			h.kind, h.addr, h.rkey = kindRTSRead, AddrOf(b), reg.mr.RKey()
		}
		p.queue = append(p.queue, &out{h: h})
		if err := p.flush(); err != nil {
			p.failedPost(err)
		}
	}
	lost := p.takeLoss()
	p.mu.Unlock()
	e.report(lost)
	return req
}

// failedPost fails the link after a post was refused; p.mu is held.
func (p *peer) failedPost(err error) transport.Request {
	p.fail(fmt.Errorf("%w: post: %w", transport.ErrPeerClosed, err), true)
	return transport.Completed(p.sendErr())
}

func (p *peer) sendErr() error {
	if errors.Is(p.err, transport.ErrClosed) {
		return transport.ErrClosed
	}
	return &transport.PeerError{Op: "send", Peer: p.rank, Err: p.err}
}

func (p *peer) recvErr() error {
	if errors.Is(p.err, transport.ErrClosed) {
		return transport.ErrClosed
	}
	return &transport.PeerError{Op: "recv", Peer: p.rank, Err: p.err}
}

// postRecv (re)posts receive slot i.
func (p *peer) postRecv(i int) error {
	s := p.e.cfg.SlotSize
	wr := RecvWR{ID: wrID(p.rank, wrRecv, uint64(i)), Addr: AddrOf(p.recvSlab[i*s:]), Len: uint32(s), LKey: p.recvMR.LKey()}
	if err := p.qp.PostRecv(&wr); err != nil {
		return fmt.Errorf("post receive: %w", err)
	}
	return nil
}

// canPost reports whether o can be posted now: a credit (the last one only
// for a reserve message), a send slot, room in the send queue.
func (p *peer) canPost(o *out) bool {
	limit := uint64(p.e.cfg.RecvDepth - 1)
	if o.reserve {
		limit++
	}
	if o.read != nil { // a read takes no receive slot of the peer
		return p.sqOut+writes(uint64(len(o.read.dst))) <= p.e.sqDepth()
	}
	switch {
	case p.sent-p.acked+1 > limit:
		return false
	case o.write != nil && p.sqOut+writes(o.h.n) > p.e.sqDepth():
		return false
	case p.sqOut >= p.e.sqDepth():
		return false
	case o.write == nil && len(p.free) == 0:
		return false
	}
	return true
}

// post posts o, whose resources canPost has checked; p.mu is held.
func (p *peer) post(o *out) error {
	var wr SendWR
	if r := o.read; r != nil {
		n := uint64(len(r.dst))
		var off uint64
		for ; n-off > maxWrite; off += maxWrite {
			chunk := SendWR{ID: wrID(p.rank, wrRChunk, r.id), Op: OpRead, Addr: AddrOf(r.dst[off:]), Len: uint32(maxWrite),
				LKey: r.reg.mr.LKey(), RemoteAddr: o.waddr + off, RKey: o.wrkey, Signaled: true}
			if err := p.qp.PostSend(&chunk); err != nil {
				return err
			}
			p.sqOut++
		}
		wr = SendWR{ID: wrID(p.rank, wrRead, r.id), Op: OpRead, Addr: AddrOf(r.dst[off:]), Len: uint32(n - off),
			LKey: r.reg.mr.LKey(), RemoteAddr: o.waddr + off, RKey: o.wrkey, Signaled: true}
		if err := p.qp.PostSend(&wr); err != nil {
			return err
		}
		p.sqOut++
		return nil
	}
	if s := o.write; s != nil {
		// All but the last piece as plain writes; RC keeps them in order,
		// so the last one's immediate means the whole message is there.
		var off uint64
		for ; o.h.n-off > maxWrite; off += maxWrite {
			chunk := SendWR{ID: wrID(p.rank, wrChunk, o.h.id), Op: OpWrite, Addr: AddrOf(s.buf[off:]), Len: uint32(maxWrite),
				LKey: s.reg.mr.LKey(), RemoteAddr: o.waddr + off, RKey: o.wrkey, Signaled: true}
			if err := p.qp.PostSend(&chunk); err != nil {
				return err
			}
			p.sqOut++
		}
		wr = SendWR{ID: wrID(p.rank, wrWrite, o.h.id), Op: OpWriteImm, Addr: AddrOf(s.buf[off:]), Len: uint32(o.h.n - off),
			LKey: s.reg.mr.LKey(), RemoteAddr: o.waddr + off, RKey: o.wrkey, Imm: uint32(o.h.tag), Signaled: true}
	} else {
		slot := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		s := p.e.cfg.SlotSize
		b := p.sendSlab[slot*s : (slot+1)*s]
		o.h.consumed = p.consumed
		p.reported = p.consumed
		o.h.put(b)
		n := headerLen + copy(b[headerLen:], o.payload)
		wr = SendWR{ID: wrID(p.rank, wrSend, uint64(slot)), Op: OpSend, Addr: AddrOf(b), Len: uint32(n),
			LKey: p.sendMR.LKey(), Signaled: true}
		if o.h.kind == kindBye {
			p.byeID = wr.ID
		}
	}
	if err := p.qp.PostSend(&wr); err != nil {
		return err
	}
	p.sent++
	p.sqOut++
	if o.req != nil {
		o.req.Complete(nil)
	}
	return nil
}

// flush posts the queued messages in order while resources last, then
// returns credits if the peer may be short of them; p.mu is held.
func (p *peer) flush() error {
	for len(p.queue) > 0 && p.err == nil && p.canPost(p.queue[0]) {
		o := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		if err := p.post(o); err != nil {
			return err
		}
	}
	if len(p.queue) == 0 {
		p.queue = nil
	}
	if p.err == nil && p.consumed-p.reported >= uint64(p.e.cfg.RecvDepth/2) {
		o := &out{h: header{kind: kindCredit}, reserve: true}
		if p.canPost(o) {
			return p.post(o)
		}
	}
	return nil
}

// progress is the endpoint's one goroutine: it polls the completion
// queue, spinning for Config.Spin after the last completion and then
// parking on the completion channel, and sends heartbeats.
func (e *Endpoint) progress() {
	defer close(e.done)
	wc := make([]WC, 32)
	hb := e.cfg.Heartbeat
	nextBeat := time.Now().Add(hb)
	idle := time.Now()
	for e.ctx.Err() == nil {
		n, err := e.cq.Poll(wc)
		if err != nil {
			e.failAll(fmt.Errorf("%w: poll completion queue: %w", transport.ErrPeerClosed, err))
			return
		}
		for i := range n {
			e.handle(&wc[i])
		}
		now := time.Now()
		if hb > 0 && !now.Before(nextBeat) {
			e.beat()
			nextBeat = now.Add(hb)
		}
		if n > 0 {
			idle = now
			continue
		}
		if now.Sub(idle) < e.cfg.Spin {
			runtime.Gosched()
			continue
		}
		if err := e.cq.Arm(); err != nil {
			e.failAll(fmt.Errorf("%w: arm completion queue: %w", transport.ErrPeerClosed, err))
			return
		}
		if n, err = e.cq.Poll(wc); err == nil && n > 0 {
			for i := range n {
				e.handle(&wc[i])
			}
			idle = time.Now()
			continue
		}
		wait := time.Second
		if hb > 0 {
			wait = time.Until(nextBeat)
		}
		ctx, cancel := context.WithTimeout(e.ctx, wait)
		err = e.cq.Wait(ctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			e.failAll(fmt.Errorf("%w: completion channel: %w", transport.ErrPeerClosed, err))
			return
		}
		idle = time.Now()
	}
}

// beat posts a zero-byte RDMA WRITE to every peer that has none in flight:
// it needs no buffer at either end, and towards a vanished peer it
// completes with an error once the retries are spent.
func (e *Endpoint) beat() {
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		p.mu.Lock()
		if p.err == nil && !p.beatOut && p.sqOut < e.sqDepth() {
			wr := SendWR{ID: wrID(p.rank, wrBeat, 0), Op: OpWrite, Signaled: true}
			if err := p.qp.PostSend(&wr); err != nil {
				p.fail(fmt.Errorf("%w: post heartbeat: %w", transport.ErrPeerClosed, err), true)
			} else {
				p.beatOut = true
				p.sqOut++
			}
		}
		lost := p.takeLoss()
		p.mu.Unlock()
		e.report(lost)
	}
}

// handle processes one completion.
func (e *Endpoint) handle(wc *WC) {
	rank, what, index := splitID(wc.ID)
	if rank >= len(e.peers) || e.peers[rank] == nil {
		return
	}
	p := e.peers[rank]
	p.mu.Lock()
	if p.err == nil {
		var err error
		if wc.Status != StatusSuccess {
			err = fmt.Errorf("%w: %w", transport.ErrPeerClosed, &CompletionError{Status: wc.Status, Op: wc.Op, Vendor: wc.Vendor})
		} else {
			err = p.complete(wc, what, index)
		}
		if err == nil {
			err = p.flush()
		}
		if err != nil {
			p.fail(err, true)
		}
	}
	lost := p.takeLoss()
	p.mu.Unlock()
	e.report(lost)
}

// complete processes a successful completion; p.mu is held. An error
// fails the link.
func (p *peer) complete(wc *WC, what int, index uint64) error {
	switch what {
	case wrSend:
		p.sqOut--
		p.free = append(p.free, int(index))
		if wc.ID == p.byeID {
			p.byeID = 0
		}
	case wrBeat:
		p.sqOut--
		p.beatOut = false
	case wrChunk, wrRChunk:
		p.sqOut--
	case wrRead:
		p.sqOut--
		r := p.recvs[index]
		if r == nil {
			return fmt.Errorf("%w: read for unknown receive %d", transport.ErrProtocol, index)
		}
		delete(p.recvs, index)
		p.finishRecv(r)
		p.queue = append(p.queue, &out{h: header{kind: kindFin, id: r.snd}})
	case wrWrite:
		p.sqOut--
		if s := p.sends[index]; s != nil {
			delete(p.sends, index)
			p.e.cache.put(s.reg)
			s.req.Complete(nil)
		}
	case wrRecv:
		return p.received(wc, int(index))
	}
	return nil
}

// received processes the message in receive slot i and reposts the slot.
func (p *peer) received(wc *WC, i int) error {
	e := p.e
	s := e.cfg.SlotSize
	var err error
	if wc.Op == WCRecvImm {
		err = p.written(uint64(wc.Imm), int(wc.Len))
	} else {
		err = p.message(p.recvSlab[i*s:(i+1)*s], int(wc.Len))
	}
	if err != nil {
		return err
	}
	if p.err != nil { // a goodbye
		return nil
	}
	if err := p.postRecv(i); err != nil {
		return err
	}
	p.consumed++
	return nil
}

// message processes a message with a header; p.mu is held.
func (p *peer) message(b []byte, got int) error {
	e := p.e
	h, err := parseHeader(b, got, e.cfg.MaxMessage)
	if err != nil {
		return err
	}
	p.acked = max(p.acked, h.consumed)
	tag := transport.Tag(h.tag)
	switch h.kind {
	case kindEager:
		data := b[headerLen : headerLen+int(h.n)]
		if q, ok := p.blocked[tag]; ok {
			p.blocked[tag] = append(q, held{data: append(scratch.Get(len(data))[:0], data...)})
			return nil
		}
		_ = e.m.Deliver(p.rank, tag, data) // an aborted matcher drops it
	case kindRTS, kindRTSRead:
		if q, ok := p.blocked[tag]; ok {
			p.blocked[tag] = append(q, held{rts: &h})
			return nil
		}
		return p.startRecv(&h)
	case kindCTS:
		s := p.sends[h.id]
		if s == nil || h.n > uint64(len(s.buf)) {
			return fmt.Errorf("%w: clear-to-send for send %d of %d bytes", transport.ErrProtocol, h.id, h.n)
		}
		if h.n == 0 {
			delete(p.sends, h.id)
			e.cache.put(s.reg)
			s.req.Complete(nil)
			return nil
		}
		p.queue = append(p.queue, &out{h: header{tag: h.tag, n: h.n, id: h.id}, write: s, waddr: h.addr, wrkey: h.rkey})
	case kindFin:
		s := p.sends[h.id]
		if s == nil {
			return fmt.Errorf("%w: end of read for send %d", transport.ErrProtocol, h.id)
		}
		delete(p.sends, h.id)
		e.cache.put(s.reg)
		s.req.Complete(nil)
	case kindCredit:
	case kindBye:
		p.fail(transport.ErrPeerClosed, false)
	}
	return nil
}

// startRecv answers a rendezvous announcement h: it finds where the data
// goes, the receive posted for the tag or a pooled buffer that joins the
// unexpected queue once filled (later messages of the tag wait for it),
// and then tells the sender where to write (CTS) or, when the sender
// offered its buffer for reading, reads it.
func (p *peer) startRecv(h *header) error {
	e := p.e
	tag := transport.Tag(h.tag)
	r := &rdvRecv{tag: tag, n: int(h.n), snd: h.id}
	if pr := e.m.Claim(p.rank, tag); pr != nil {
		r.pr = pr
		r.dst = pr.Buf()[:min(int(h.n), len(pr.Buf()))]
	} else {
		r.buf = scratch.Get(int(h.n))
		r.dst = r.buf
		p.blocked[tag] = nil
	}
	r.id = p.nextRecv
	p.nextRecv = (p.nextRecv + 1) & 0xffffffff // the immediate carries 32 bits
	if len(r.dst) == 0 {
		p.finishRecv(r)
		if h.kind == kindRTSRead {
			p.queue = append(p.queue, &out{h: header{kind: kindFin, id: h.id}})
		} else {
			p.queue = append(p.queue, &out{h: header{kind: kindCTS, id: h.id, tag: r.id}})
		}
		return nil
	}
	reg, err := e.cache.get(r.dst)
	if err != nil {
		if r.pr != nil {
			r.pr.Complete(&transport.PeerError{Op: "recv", Peer: p.rank, Err: err})
		}
		return err
	}
	r.reg = reg
	p.recvs[r.id] = r
	if h.kind == kindRTSRead {
		p.queue = append(p.queue, &out{read: r, waddr: h.addr, wrkey: h.rkey})
		return nil
	}
	p.queue = append(p.queue, &out{h: header{kind: kindCTS, id: h.id, tag: r.id, n: uint64(len(r.dst)),
		addr: AddrOf(r.dst), rkey: reg.mr.RKey()}})
	return nil
}

// written processes the completion of a rendezvous write into receive rid.
func (p *peer) written(rid uint64, n int) error {
	r := p.recvs[rid]
	if r == nil {
		return fmt.Errorf("%w: write for unknown receive %d", transport.ErrProtocol, rid)
	}
	delete(p.recvs, rid)
	p.finishRecv(r)
	return nil
}

func (p *peer) finishRecv(r *rdvRecv) {
	e := p.e
	if r.reg != nil {
		e.cache.put(r.reg)
	}
	if r.pr != nil {
		var err error
		if r.n != len(r.pr.Buf()) {
			err = transport.LengthError(p.rank, len(r.pr.Buf()), r.n)
		}
		r.pr.Complete(err)
		return
	}
	_ = e.m.DeliverOwned(p.rank, r.tag, r.buf)
	p.unblock(r.tag)
}

// unblock delivers the messages held behind a finished rendezvous, up to
// the next unexpected one.
func (p *peer) unblock(tag transport.Tag) {
	q := p.blocked[tag]
	delete(p.blocked, tag)
	for i, h := range q {
		if h.rts == nil {
			_ = p.e.m.DeliverOwned(p.rank, tag, h.data)
			continue
		}
		if err := p.startRecv(h.rts); err != nil {
			p.fail(err, true)
			return
		}
		if _, ok := p.blocked[tag]; ok {
			p.blocked[tag] = append(p.blocked[tag], q[i+1:]...)
			return
		}
	}
}

// fail marks the link failed with cause, moves the queue pair to the error
// state so the adapter lets go of every buffer, fails every request
// pending on the peer, and, if report, arranges for the loss to be
// reported once p.mu is released (takeLoss). p.mu is held.
func (p *peer) fail(cause error, report bool) {
	if p.err != nil {
		return
	}
	p.err = cause
	if p.qp != nil {
		p.qp.SetError()
	}
	e := p.e
	sendErr, recvErr := p.sendErr(), p.recvErr()
	for _, o := range p.queue {
		if o.req != nil {
			o.req.Complete(sendErr)
		}
	}
	p.queue = nil
	for id, s := range p.sends {
		delete(p.sends, id)
		e.cache.put(s.reg)
		s.req.Complete(sendErr)
	}
	for id, r := range p.recvs {
		delete(p.recvs, id)
		if r.reg != nil {
			e.cache.put(r.reg)
		}
		if r.pr != nil {
			r.pr.Complete(recvErr)
		} else {
			scratch.Put(r.buf)
		}
	}
	for tag, q := range p.blocked {
		delete(p.blocked, tag)
		for _, h := range q {
			if h.data != nil {
				scratch.Put(h.data)
			}
		}
	}
	if !errors.Is(cause, transport.ErrClosed) {
		e.m.FailPeer(p.rank, recvErr)
		e.cfg.Logger.Debug("ib: link failed", "rank", e.cfg.Rank, "peer", p.rank, "err", cause)
	}
	if report && !e.closing.Load() {
		p.lost = &transport.PeerError{Op: "link", Peer: p.rank, Err: cause}
	}
}

// takeLoss returns the loss to report, once; p.mu is held.
func (p *peer) takeLoss() *transport.PeerError {
	l := p.lost
	p.lost = nil
	return l
}

func (e *Endpoint) report(lost *transport.PeerError) {
	if lost == nil {
		return
	}
	if f := e.onLoss.Load(); f != nil {
		(*f)(lost)
	}
}

// failAll fails every link: the device or its completion queue broke.
func (e *Endpoint) failAll(cause error) {
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		p.mu.Lock()
		p.fail(cause, true)
		lost := p.takeLoss()
		p.mu.Unlock()
		e.report(lost)
	}
}

// Close says goodbye to every peer (their receives from this rank fail
// with ErrPeerClosed, without a loss report), stops the progress
// goroutine, moves every queue pair to the error state and destroys it,
// so that the adapter touches no buffer any more, fails every pending
// request with transport.ErrClosed, and frees the device. It is safe to
// call more than once.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		byes := 0
		for _, p := range e.peers {
			if p == nil {
				continue
			}
			p.mu.Lock()
			if p.err == nil {
				o := &out{h: header{kind: kindBye}, reserve: true}
				if p.canPost(o) && p.post(o) == nil {
					byes++
				}
			}
			p.mu.Unlock()
		}
		e.cancel()
		if e.started {
			<-e.done
		}
		if byes > 0 {
			e.linger()
		}
		for _, p := range e.peers {
			if p != nil && p.qp != nil {
				p.qp.SetError()
			}
		}
		e.m.Abort(transport.ErrClosed)
		for _, p := range e.peers {
			if p == nil {
				continue
			}
			p.mu.Lock()
			p.fail(transport.ErrClosed, false)
			p.mu.Unlock()
		}
		e.release()
	})
	return nil
}

// linger polls the completion queue, for a short while at most, until
// every goodbye has left (a queue pair destroyed at once could drop it).
func (e *Endpoint) linger() {
	wc := make([]WC, 32)
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		n, err := e.cq.Poll(wc)
		if err != nil {
			return
		}
		for i := range n {
			if rank, what, _ := splitID(wc[i].ID); what == wrSend && rank < len(e.peers) && e.peers[rank] != nil {
				p := e.peers[rank]
				p.mu.Lock()
				if wc[i].ID == p.byeID {
					p.byeID = 0
				}
				p.mu.Unlock()
			}
		}
		pending := false
		for _, p := range e.peers {
			if p != nil {
				p.mu.Lock()
				pending = pending || p.byeID != 0
				p.mu.Unlock()
			}
		}
		if !pending {
			return
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

// release destroys the queue pairs, deregisters the slots and the cached
// regions, and closes the completion queue and the device.
func (e *Endpoint) release() {
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		if p.qp != nil {
			p.qp.Close()
		}
		if p.recvMR != nil {
			p.recvMR.Dereg()
		}
		if p.sendMR != nil {
			p.sendMR.Dereg()
		}
	}
	if e.cq != nil {
		e.cq.Close()
	}
	e.cache.close()
	e.dev.Close()
	e.cancel()
}
