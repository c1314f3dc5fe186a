package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccl/goccl/internal/quiet"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/transport"
	"golang.org/x/sys/unix"
)

// A frame is a fixed 16-byte header, then the payload:
//
//	tag    uint64 little-endian
//	length uint64 little-endian
//
// With several streams, a payload of at least DefaultStripeMin bytes is
// split into Streams near-equal parts: part 0 follows the header on stream
// 0, part i travels alone on stream i. Both sides derive the split from the
// length, so the other streams carry raw bytes without headers.
const headerLen = 16

// maxBatch bounds how many queued small messages one vectored write takes.
const (
	maxBatch      = 64
	maxBatchBytes = 1 << 20
)

type endpoint struct {
	rank, size int
	m          *transport.Matcher
	// peers holds the link to each peer once it is up: nil at our own
	// rank and, with lazy links (lazy.go), for a peer not linked yet.
	peers     []atomic.Pointer[peer]
	lazy      *links // nil: Connect made every link
	cfg       *Config
	log       *slog.Logger
	maxMsg    int64
	stripeMin int
	// readBufs counts the read buffers its links hold (bufread.go).
	readBufs  atomic.Int64
	closing   atomic.Bool
	closeOnce sync.Once
	wg        sync.WaitGroup
	onLoss    atomic.Pointer[func(*transport.PeerError)]
	onLink    atomic.Pointer[func(peer int)] // lazy.go
}

var (
	_ transport.Endpoint      = (*endpoint)(nil)
	_ transport.StrayReporter = (*endpoint)(nil)
)

// OnStray implements transport.StrayReporter.
func (e *endpoint) OnStray(finished func(transport.Tag) bool, report func(from int, tag transport.Tag, head []byte)) {
	e.m.SetStray(finished, report)
}

// Retire implements transport.StrayReporter.
func (e *endpoint) Retire(tag transport.Tag) { e.m.Retire(tag) }

type sendOp struct {
	tag transport.Tag
	b   []byte
	r   *transport.Req
}

type stripeJob struct {
	b []byte // nil: read and discard n bytes
	n int
}

type writerKind uint8

const (
	noWriter writerKind = iota
	inlineWriter
	loopWriter
)

// inlineMax is the largest message that Isend writes itself, on the
// caller's goroutine, when the connection is idle: it saves the hand-off
// to sendLoop (two thread wake-ups) on the latency-bound path, and is far
// below the socket buffer, so the write does not wait on the peer.
//
// With GOMAXPROCS 1 Isend writes messages of any size inline, as much as
// the socket takes at once (the rest goes to sendLoop): sendLoop could
// not write in parallel with the caller anyway, only after the caller
// parks, so that handing it the message only delayed it (the caller's
// wait polls first), and cost a hand-off. With more it writes the large
// ones while the caller goes on to its receives. Striped messages always
// go to sendLoop, which hands the parts to the streams' writers.
const inlineMax = 16 << 10

type restOp struct {
	bufs net.Buffers
	r    *transport.Req
}

type peer struct {
	e     *endpoint
	rank  int
	conns []net.Conn
	br    []*bufReader // read buffers held only while there is traffic (bufread.go)

	mu    sync.Mutex
	queue []sendOp
	spare []sendOp
	err   error // once set, sends fail with it
	// left is set when the peer said goodbye: it closed on purpose.
	left atomic.Bool
	// senderOn: sendLoop runs. Guarded by mu.
	senderOn bool
	// writer says who writes to conns[0] now: nobody, an Isend writing a
	// small message inline, or sendLoop. Guarded by mu.
	writer writerKind
	// rest is what an inline write left unwritten (the socket buffer was
	// full); sendLoop writes it before anything queued.
	rest *restOp
	// raw lets Isend try a non-blocking write; nil if the connection is
	// not a socket (tests use net.Pipe).
	raw syscall.RawConn
	// inl is the inline writer's (writer == inlineWriter).
	inl inlineWrite
	// polls: conns[0] is read through a spinReader, which arms a
	// waiter's ctx only before it blocks (reader.go).
	polls bool
	wake  chan struct{}
	quit  chan struct{}
	once  sync.Once

	// Streams 1..n-1: jobs for their reader and writer goroutines.
	rjobs []chan stripeJob
	wjobs []chan []byte
	rdone chan error
	wdone chan error

	rd reader // who reads conns[0] (reader.go)
}

func newEndpoint(cfg *Config, conns [][]net.Conn, log *slog.Logger) (*endpoint, error) {
	e := &endpoint{
		rank: cfg.Rank, size: cfg.Size, m: transport.NewMatcher(cfg.Size),
		peers: make([]atomic.Pointer[peer], cfg.Size), log: log, maxMsg: cfg.MaxMessage,
		stripeMin: DefaultStripeMin, cfg: cfg,
	}
	for r, cs := range conns {
		if r == cfg.Rank || cs == nil {
			continue
		}
		e.peers[r].Store(e.newPeer(r, cs))
	}
	for i := range e.peers {
		if p := e.peers[i].Load(); p != nil {
			e.start(p)
		}
	}
	return e, nil
}

// newPeer makes the link to rank r over its authenticated connections cs
// (one per stream); start sets it going.
func (e *endpoint) newPeer(r int, cs []net.Conn) *peer {
	cfg := e.cfg
	for i, c := range cs {
		setSockOpts(c, cfg.SocketBuffer)
		if cfg.WrapConn != nil {
			cs[i] = cfg.WrapConn(r, c)
		} else if tc, ok := c.(*net.TCPConn); ok {
			// Out of the runtime's poller: the bytes that land on it
			// wake no idle thread while a waiter polls (internal/quiet).
			if q, err := quiet.Wrap(tc); err == nil {
				cs[i] = q
			}
		}
	}
	p := &peer{e: e, rank: r, conns: cs, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	p.rd.init()
	p.rd.spinner = transport.NewSpinner(cfg.Spin)
	if cfg.Yield {
		p.rd.spinner = transport.NewYieldSpinner(cfg.Spin)
	}
	if sc, ok := cs[0].(syscall.Conn); ok {
		p.raw, _ = sc.SyscallConn()
	}
	p.inl.fn = p.inl.writev
	p.rd.tryFn = p.rd.readNow
	for i, c := range cs {
		var src io.Reader = c
		var wait func() error
		if i == 0 && p.raw != nil && cfg.WrapConn == nil {
			src, wait = &spinReader{c: c, p: p}, p.awaitReadable
			p.polls = true
		}
		p.br = append(p.br, newBufReader(src, wait, &e.readBufs))
		if i > 0 {
			p.rjobs = append(p.rjobs, make(chan stripeJob))
			p.wjobs = append(p.wjobs, make(chan []byte))
		}
	}
	p.rdone = make(chan error, len(cs))
	p.wdone = make(chan error, len(cs))
	return p
}

// start runs p's goroutines, in e.wg.
func (e *endpoint) start(p *peer) {
	e.wg.Go(p.readLoop) // sendLoop starts when a send is queued
	for i := 1; i < len(p.conns); i++ {
		e.wg.Go(func() { p.stripeReader(i) })
		e.wg.Go(func() { p.stripeWriter(i) })
	}
}

func (e *endpoint) Rank() int { return e.rank }
func (e *endpoint) Size() int { return e.size }

func (e *endpoint) Irecv(from int, tag transport.Tag, b []byte) transport.Request {
	r := e.m.Post(from, tag, b)
	if pr, ok := r.(*transport.PostedRecv); ok && from != e.rank {
		if p := e.peers[from].Load(); p != nil {
			rr := recvReqs.Get().(*recvReq)
			rr.PostedRecv, rr.p = pr, p
			return rr
		}
		// Not linked yet (lazy.go): the peer's reader delivers it once
		// the link is up.
	}
	return r
}

func (e *endpoint) Isend(to int, tag transport.Tag, b []byte) transport.Request {
	if err := transport.CheckPeer("send", to, e.size); err != nil {
		return transport.Completed(err)
	}
	if e.closing.Load() {
		return transport.Completed(transport.ErrClosed)
	}
	if to == e.rank {
		if err := e.m.Deliver(to, tag, b); err != nil {
			return transport.Completed(err)
		}
		return transport.Completed(nil)
	}
	if int64(len(b)) > e.maxMsg {
		return transport.Completed(&transport.PeerError{Op: "send", Peer: to,
			Err: fmt.Errorf("message of %d bytes exceeds MaxMessage %d", len(b), e.maxMsg)})
	}
	p := e.peers[to].Load()
	if p == nil {
		if e.lazy == nil {
			return transport.Completed(&transport.PeerError{Op: "send", Peer: to, Err: transport.ErrClosed})
		}
		return e.lazy.send(to, tag, b)
	}
	return p.isend(tag, b)
}

// isend is Isend over the link to p.
func (p *peer) isend(tag transport.Tag, b []byte) transport.Request {
	e := p.e
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return transport.Completed(err)
	}
	if p.writer == noWriter && len(p.queue) == 0 && p.rest == nil && p.raw != nil &&
		(len(b) <= inlineMax || !p.striped(len(b)) && runtime.GOMAXPROCS(0) == 1) {
		p.writer = inlineWriter
		p.mu.Unlock()
		return p.writeInline(tag, b)
	}
	r := transport.NewRequest()
	p.queue = append(p.queue, sendOp{tag: tag, b: b, r: r})
	p.startSender()
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return &sendReq{Req: r, e: e}
}

// Close aborts pending requests with ErrClosed, closes every connection and
// waits for the endpoint's goroutines.
func (e *endpoint) Close() error {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		if e.lazy != nil {
			e.lazy.close() // no link comes up after this
		}
		e.m.Abort(transport.ErrClosed)
		for i := range e.peers {
			if p := e.peers[i].Load(); p != nil {
				p.goodbye()
				p.shutdown(transport.ErrClosed)
			}
		}
		e.wg.Wait()
	})
	return nil
}

// goodbyeTag marks the frame a closing endpoint sends each peer, so that
// the peer tells a rank that left from a rank that was lost (whose socket
// just breaks). It is outside every tag the root package uses.
const goodbyeTag = ^transport.Tag(0)

// goodbye tells the peer this endpoint is closing on purpose. Queued sends
// are dropped (they fail with ErrClosed); a frame being written is let
// finish, for up to 200 ms, so the goodbye lands on a frame boundary,
// but not while the peer reads none of it: when the bytes unsent in the
// socket have not moved for goodbyeStall, the peer is not running (a
// stopped process keeps its socket open; issue 34) and the goodbye is
// given up, so that Close does not add 200 ms to a stalled call. It
// takes the connection for good.
func (p *peer) goodbye() {
	start := time.Now()
	deadline := start.Add(200 * time.Millisecond)
	unsent, moved := -1, start
	for {
		p.mu.Lock()
		if p.err != nil {
			p.mu.Unlock()
			return
		}
		dropped := p.queue
		p.queue = nil
		free := p.writer == noWriter && p.rest == nil
		if free {
			p.writer = loopWriter
		}
		p.mu.Unlock()
		for _, op := range dropped {
			op.r.Complete(transport.ErrClosed)
		}
		if free {
			break
		}
		now := time.Now()
		if now.After(deadline) {
			return
		}
		if q := p.unsent(); q != unsent || q <= 0 {
			unsent, moved = q, now
		} else if now.Sub(moved) > goodbyeStall {
			return // the peer reads nothing
		}
		time.Sleep(time.Millisecond)
	}
	var hdr [headerLen]byte
	binary.LittleEndian.PutUint64(hdr[0:], uint64(goodbyeTag))
	c := p.conns[0]
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	c.Write(hdr[:])
}

// goodbyeStall is how long goodbye waits for a frame in progress while
// the peer reads none of it. A peer that runs empties a loopback socket
// in well under a millisecond once it is scheduled; 50 ms leaves room
// for one that waits for a core on a loaded host.
const goodbyeStall = 50 * time.Millisecond

// unsent returns the bytes written to the first connection that the
// peer has not acknowledged yet, or -1 where that cannot be known (a
// wrapped connection, or not Linux).
func (p *peer) unsent() int {
	if p.raw == nil {
		return -1
	}
	n := -1
	p.raw.Control(func(fd uintptr) { n = unsentBytes(int(fd)) })
	return n
}

// shutdown makes later and queued sends fail with err, closes the
// connections and stops the goroutines. Only the first call counts.
func (p *peer) shutdown(err error) bool {
	first := false
	p.once.Do(func() {
		first = true
		p.failSends(err, true)
		close(p.quit)
		for _, c := range p.conns {
			c.Close()
		}
	})
	return first
}

// failSends makes later and queued sends fail with err, leaving the
// connections open; if sends have already failed, it replaces their error
// only when replace is set. It reports whether sends were still working.
func (p *peer) failSends(err error, replace bool) bool {
	p.mu.Lock()
	working := p.err == nil
	if !working && !replace {
		p.mu.Unlock()
		return false
	}
	p.err = err
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	for _, op := range q {
		op.r.Complete(err)
	}
	return working
}

// fail handles the loss of the link: cause is what broke it (an I/O error,
// or a protocol error from the peer).
func (p *peer) fail(op string, cause error) {
	if p.e.closing.Load() {
		return // our own Close: the matcher is already aborted
	}
	werr := cause
	if !errors.Is(cause, transport.ErrProtocol) {
		werr = fmt.Errorf("%w: %v", transport.ErrPeerClosed, cause)
	}
	if op == "send" && !errors.Is(cause, transport.ErrProtocol) {
		// The write side broke: the peer closed or reset its end. What it
		// sent before, a last message explaining why among it, may still
		// sit in our receive buffer, so sends fail now and the reader
		// drains the link and ends it (within a second: a read deadline).
		if p.failSends(&transport.PeerError{Op: "send", Peer: p.rank, Err: werr}, false) {
			p.e.log.Debug("tcp: send to peer failed; reading what it sent before", "peer", p.rank, "err", cause)
			p.endReadsBy(time.Now().Add(time.Second))
		}
		return
	}
	first := p.shutdown(&transport.PeerError{Op: "send", Peer: p.rank, Err: werr})
	if first {
		lvl := slog.LevelWarn
		if errors.Is(cause, io.EOF) {
			lvl = slog.LevelDebug // the peer closed its end: normal at shutdown, and a receive from it reports it
		}
		p.e.log.Log(context.Background(), lvl, "tcp: link to peer lost", "peer", p.rank, "op", op, "err", cause)
	}
	pe := &transport.PeerError{Op: "recv", Peer: p.rank, Err: werr}
	p.e.m.FailPeer(p.rank, pe)
	if f := p.e.onLoss.Load(); first && f != nil && !p.e.closing.Load() && !p.left.Load() {
		(*f)(pe)
	}
}

// OnPeerLoss implements transport.PeerLossNotifier.
func (e *endpoint) OnPeerLoss(f func(*transport.PeerError)) { e.onLoss.Store(&f) }

var _ transport.PeerLossNotifier = (*endpoint)(nil)

// recvErr is the error a receive that was being filled fails with.
func (p *peer) recvErr(cause error) error {
	if p.e.closing.Load() {
		return transport.ErrClosed
	}
	if errors.Is(cause, transport.ErrProtocol) {
		return &transport.PeerError{Op: "recv", Peer: p.rank, Err: cause}
	}
	return &transport.PeerError{Op: "recv", Peer: p.rank, Err: fmt.Errorf("%w: %v", transport.ErrPeerClosed, cause)}
}

func (p *peer) striped(n int) bool { return len(p.conns) > 1 && n >= p.e.stripeMin }

// part returns the bounds of part i of an n-byte message over k streams.
func part(n, k, i int) (lo, hi int) {
	return n * i / k, n * (i + 1) / k
}

func (p *peer) readStriped(tag transport.Tag, n int) error {
	k := len(p.conns)
	pr := p.e.m.Claim(p.rank, tag)
	var dst []byte
	switch {
	case pr == nil:
		dst = scratch.Get(n) // the matcher returns it to the pool
	case len(pr.Buf()) == n:
		dst = pr.Buf()
	}
	job := func(i int) stripeJob {
		lo, hi := part(n, k, i)
		if dst == nil {
			return stripeJob{n: hi - lo}
		}
		return stripeJob{b: dst[lo:hi], n: hi - lo}
	}
	var err error
	sent := 0
	for i := 1; i < k; i++ {
		select {
		case p.rjobs[i-1] <- job(i):
			sent++
		case <-p.quit:
			err = transport.ErrClosed
		}
	}
	if j := job(0); err == nil {
		if j.b != nil {
			_, err = io.ReadFull(p.br[0], j.b)
		} else {
			_, err = io.CopyN(io.Discard, p.br[0], int64(j.n))
		}
	}
	for range sent {
		if e := <-p.rdone; e != nil && err == nil {
			err = e
		}
	}
	switch {
	case err != nil:
		if pr != nil {
			pr.Complete(p.recvErr(err))
		}
		return err
	case pr == nil:
		p.e.m.DeliverOwned(p.rank, tag, dst)
	case dst == nil:
		pr.Complete(transport.LengthError(p.rank, len(pr.Buf()), n))
	default:
		pr.Complete(nil)
	}
	return nil
}

func (p *peer) stripeReader(i int) {
	for {
		select {
		case j := <-p.rjobs[i-1]:
			var err error
			if j.b != nil {
				_, err = io.ReadFull(p.br[i], j.b)
			} else {
				_, err = io.CopyN(io.Discard, p.br[i], int64(j.n))
			}
			p.rdone <- err
		case <-p.quit:
			return
		}
	}
}

func (p *peer) stripeWriter(i int) {
	for {
		select {
		case b := <-p.wjobs[i-1]:
			_, err := p.conns[i].Write(b)
			p.wdone <- err
		case <-p.quit:
			return
		}
	}
}

// senderIdle is how long sendLoop waits for work before it ends; the
// next send that cannot be written inline starts it again.
const senderIdle = time.Second

// startSender starts sendLoop unless it runs or the link has failed (its
// queue is then failed, and Close may be waiting for the goroutines); p.mu
// is held.
func (p *peer) startSender() {
	if !p.senderOn && p.err == nil {
		p.senderOn = true
		p.e.wg.Go(p.sendLoop)
	}
}

// sendLoop writes what Isend queued. It runs only while there is work: a
// link whose messages all go inline, or that is idle, costs one goroutine
// (its reader), not two.
func (p *peer) sendLoop() {
	hdrs := make([]byte, 0, maxBatch*headerLen)
	var vec net.Buffers
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		select {
		case <-p.wake:
		case <-p.quit:
			return
		case <-idle.C:
			p.mu.Lock()
			if len(p.queue) == 0 && p.rest == nil {
				p.senderOn = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
		}
		for p.sendQueued(&hdrs, &vec) {
		}
		idle.Reset(senderIdle)
	}
}

// sendQueued writes what is queued, unless an inline write holds the
// connection (it wakes sendLoop again when it is done). It reports whether
// it wrote anything, so that sendLoop looks again.
func (p *peer) sendQueued(hdrsp *[]byte, vecp *net.Buffers) bool {
	hdrs, vec := *hdrsp, *vecp
	defer func() { *hdrsp, *vecp = hdrs, vec }()
	{
		p.mu.Lock()
		if p.writer == inlineWriter || (len(p.queue) == 0 && p.rest == nil) {
			if p.writer == loopWriter {
				p.writer = noWriter
			}
			p.mu.Unlock()
			return false
		}
		p.writer = loopWriter
		if rest := p.rest; rest != nil {
			p.rest = nil
			p.mu.Unlock()
			if _, err := writeBuffers(p.conns[0], &rest.bufs); err != nil {
				rest.r.Complete(p.sendErr(err))
				p.fail("send", err)
				return false
			}
			rest.r.Complete(nil)
			return true
		}
		ops := p.queue
		p.queue, p.spare = p.spare, nil
		p.mu.Unlock()
		orig := ops
		for len(ops) > 0 {
			// Batch small messages into one vectored write.
			var n, bytes int
			hdrs, vec = hdrs[:0], vec[:0]
			for n < len(ops) && n < maxBatch && !p.striped(len(ops[n].b)) &&
				(n == 0 || bytes+len(ops[n].b) <= maxBatchBytes) {
				op := ops[n]
				hdrs = binary.LittleEndian.AppendUint64(hdrs, uint64(op.tag))
				hdrs = binary.LittleEndian.AppendUint64(hdrs, uint64(len(op.b)))
				bytes += len(op.b)
				n++
			}
			var err error
			if n > 0 {
				for i := range n {
					vec = append(vec, hdrs[i*headerLen:(i+1)*headerLen])
					if len(ops[i].b) > 0 {
						vec = append(vec, ops[i].b)
					}
				}
				w := vec // the write consumes it
				_, err = writeBuffers(p.conns[0], &w)
			} else {
				n = 1
				err = p.writeStriped(ops[0])
			}
			if err != nil {
				for _, op := range ops {
					op.r.Complete(p.sendErr(err))
				}
				clear(ops)
				p.fail("send", err)
				return false
			}
			for _, op := range ops[:n] {
				op.r.Complete(nil)
			}
			clear(ops[:n])
			ops = ops[n:]
		}
		p.mu.Lock()
		if p.spare == nil && cap(orig) <= 1024 {
			p.spare = orig[:0]
		}
		p.mu.Unlock()
	}
	return true
}

// inlineWrite is what an inline write uses, kept in the peer so that it
// allocates nothing: the frame header, the vector and the outcome of the
// writev, and fn, the function RawConn.Write runs (writev).
type inlineWrite struct {
	hdr [headerLen]byte
	iov [2][]byte
	k   int // entries of iov in use
	n   int
	err error
	fn  func(fd uintptr) bool
}

// writev is one non-blocking writev of w.iov[:w.k].
func (w *inlineWrite) writev(fd uintptr) bool {
	w.n, w.err = writevNB(int(fd), w.iov[:w.k])
	return true // done or not, never wait for the socket here
}

// writeInline tries to write one small message on the caller's goroutine
// with one non-blocking writev; the caller holds the connection as
// inlineWriter. If the socket takes only part of it, the rest goes to
// sendLoop, ahead of anything queued, so Isend never blocks.
func (p *peer) writeInline(tag transport.Tag, b []byte) transport.Request {
	w := &p.inl
	hdr := w.hdr[:]
	binary.LittleEndian.PutUint64(hdr[0:], uint64(tag))
	binary.LittleEndian.PutUint64(hdr[8:], uint64(len(b)))
	w.iov[0], w.iov[1], w.k = hdr, b, 2
	if len(b) == 0 {
		w.k = 1
	}
	w.n, w.err = 0, nil
	err := p.raw.Write(w.fn)
	n, werr := max(w.n, 0), w.err
	w.iov[1] = nil // the caller's buffer: not kept past the call
	if err == nil && werr != nil && werr != unix.EAGAIN {
		err = werr
	}
	var r transport.Request
	p.mu.Lock()
	switch {
	case err != nil:
		r = nil
	case n == headerLen+len(b):
		r = transport.Completed(nil)
	default:
		// The socket buffer is full: sendLoop writes the rest.
		req := transport.NewRequest()
		var rest net.Buffers
		if n < headerLen {
			rest = append(rest, append([]byte(nil), hdr[n:]...), b)
		} else {
			rest = append(rest, b[n-headerLen:])
		}
		p.rest = &restOp{bufs: rest, r: req}
		r = &sendReq{Req: req, e: p.e}
	}
	p.writer = noWriter
	wake := p.rest != nil || len(p.queue) > 0
	if wake {
		p.startSender()
	}
	p.mu.Unlock()
	if wake {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	if err != nil {
		p.fail("send", err)
		return transport.Completed(p.sendErr(err))
	}
	return r
}

func (p *peer) sendErr(cause error) error {
	if p.e.closing.Load() {
		return transport.ErrClosed
	}
	return &transport.PeerError{Op: "send", Peer: p.rank, Err: fmt.Errorf("%w: %v", transport.ErrPeerClosed, cause)}
}

func (p *peer) writeStriped(op sendOp) error {
	k, n := len(p.conns), len(op.b)
	var hdr [headerLen]byte
	binary.LittleEndian.PutUint64(hdr[0:], uint64(op.tag))
	binary.LittleEndian.PutUint64(hdr[8:], uint64(n))
	sent := 0
	var err error
	for i := 1; i < k; i++ {
		lo, hi := part(n, k, i)
		select {
		case p.wjobs[i-1] <- op.b[lo:hi]:
			sent++
		case <-p.quit:
			err = transport.ErrClosed
		}
	}
	if err == nil {
		_, hi := part(n, k, 0)
		w := net.Buffers{hdr[:], op.b[:hi]}
		_, err = writeBuffers(p.conns[0], &w)
	}
	for range sent {
		if e := <-p.wdone; e != nil && err == nil {
			err = e
		}
	}
	return err
}

// writeBuffers writes all of *bufs to c in vectored writes, consuming
// them: net.Buffers.WriteTo reaches writev only on the runtime's own
// connections, and a quiet one (internal/quiet) has its own.
func writeBuffers(c net.Conn, bufs *net.Buffers) (int64, error) {
	if q, ok := c.(interface {
		WriteBuffers(*net.Buffers) (int64, error)
	}); ok {
		return q.WriteBuffers(bufs)
	}
	return bufs.WriteTo(c)
}
