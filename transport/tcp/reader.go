package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/transport"
	"golang.org/x/sys/unix"
)

// Reading a peer's first stream: the read token.
//
// The bytes of a peer's conns[0] are read by whoever holds that peer's read
// token, one goroutine at a time, so frames are delivered in order, and a
// frame read in part is finished by the next holder. A goroutine that waits
// on a receive from the peer takes the token if it is free and reads the
// socket itself until its receive completes (recvReq.Wait): the message
// lands without a hand-off from a reader goroutine, which costs as much as
// the network on a latency-bound exchange (readying a goroutine makes the
// runtime wake another thread, on a machine with idle cores). On a plain
// socket the waiter also polls a little before it sleeps (spinReader).
//
// readLoop, the peer's background reader, reads while no one waits, so
// that unexpected messages reach the matcher, two ranks that send each
// other more than the socket buffers hold both make progress, and a lost
// link is noticed. It yields the token at the next frame boundary to a
// goroutine that wants it. It takes the token back once the token has lain
// unused for readIdle (taking it at once would put the next waiter behind
// it), and at once when a holder leaves reading behind (a frame half read
// because its ctx ended, a striped frame, part of a next frame) or when a
// goroutine blocks on a send (sendReq.Wait).

// readIdle is how long a free read token lies unused before readLoop takes
// it back (a variable for tests). While a waiter holds the token, readLoop
// looks less and less often, down to once per 32*readIdle.
var readIdle = time.Millisecond

// errHandOff: a waiter met a striped frame, which readLoop reads (it takes
// the other streams' goroutines).
var errHandOff = errors.New("tcp: striped frame left to the reader goroutine")

// aLongTimeAgo is a read deadline that interrupts a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// reader is a peer's read-token state.
type reader struct {
	// The token is in tok when free for anyone, in bgTok when handed to
	// readLoop, else held by the goroutine that took it.
	tok, bgTok chan struct{}
	wanted     atomic.Int32  // goroutines blocked wanting the token
	takes      atomic.Uint64 // times a waiter took the token
	bgWants    atomic.Bool   // a blocked send asked readLoop to read
	dead       atomic.Bool   // the link failed: nothing is read any more

	// The token holder's: the frame being read and its header bytes.
	f   frame
	hdr [headerLen]byte
	// spin: the holder is a waiter, which polls the socket a little
	// before it sleeps (spinReader).
	spin    bool
	spinner *transport.Spinner // Config.Spin's, this link's own
	// wctx is the waiter's ctx, which spinReader arms (stop not nil) only
	// before a read that may block: see readFor.
	wctx  context.Context
	stop  func() bool
	tries uint64 // non-blocking reads made (tests)
	// A non-blocking read without allocating: tryFn (readNow) reads into
	// tryBuf and leaves its outcome in tryN and tryErr.
	tryFn  func(fd uintptr) bool
	tryBuf []byte
	tryN   int
	tryErr error
	// tryPolls: readNow asks poll(2) up to this many times first and
	// reads only if there are bytes (see spinReader); 0: it reads at once.
	tryPolls int
	pfd      unix.PollFd
	zeroTS   unix.Timespec

	// Interrupting a waiter whose ctx ends while it reads, and the read
	// deadline of the link otherwise (endReadsBy).
	imu      sync.Mutex
	armSeq   uint64
	armed    bool
	fired    atomic.Bool // written under imu
	deadline time.Time
}

func (rd *reader) init() {
	rd.tok = make(chan struct{}, 1)
	rd.bgTok = make(chan struct{}, 1)
}

// frame is the progress of reading one frame; a zero frame is between
// frames.
type frame struct {
	hdrN    int  // header bytes read
	active  bool // header read, payload next
	striped bool
	tag     transport.Tag
	n       int
	pr      *transport.PostedRecv // the receive it lands in; nil: unexpected
	dst     []byte                // where the payload goes
	got     int                   // bytes of dst read
	skip    int64                 // bytes to discard after dst (a short receive)
}

// recvReq is a receive from a remote peer: waiting on it reads the socket
// when no one else does.
type recvReq struct {
	*transport.PostedRecv
	p *peer
}

func (r *recvReq) Wait(ctx context.Context) error { return r.p.waitRecv(ctx, r.PostedRecv) }

// recvReqs holds released recvReqs for reuse, so that a receive from a
// remote peer allocates nothing.
var recvReqs = sync.Pool{New: func() any { return new(recvReq) }}

// Release implements transport.Releaser: a completed receive goes back to
// the matcher, and r to recvReqs; a pending one is left alone.
func (r *recvReq) Release() {
	pr := r.PostedRecv
	if !pr.IsDone() {
		return
	}
	*r = recvReq{}
	pr.Release()
	recvReqs.Put(r)
}

// sendReq is a send that may wait on the peer: a goroutine that blocks on
// it first gets every peer's socket drained, so that two ranks sending to
// each other at once both make progress.
type sendReq struct {
	*transport.Req
	e *endpoint
}

func (r *sendReq) Wait(ctx context.Context) error {
	if !r.IsDone() {
		r.e.kickReaders()
	}
	return r.Req.Wait(ctx)
}

// kickReaders asks every peer's readLoop to read now.
func (e *endpoint) kickReaders() {
	for i := range e.peers {
		if p := e.peers[i].Load(); p != nil {
			p.kickReader()
		}
	}
}

// kickReader asks readLoop to read now.
func (p *peer) kickReader() {
	if p.rd.dead.Load() {
		return
	}
	p.rd.bgWants.Store(true)
	select {
	case <-p.rd.tok:
		p.rd.bgTok <- struct{}{}
	default: // the holder hands it to readLoop when done
	}
}

// endReadsBy makes reads from the peer fail once t has passed (a read
// deadline that interrupting a waiter leaves in place) and gets readLoop
// reading.
func (p *peer) endReadsBy(t time.Time) {
	rd := &p.rd
	rd.imu.Lock()
	rd.deadline = t
	for i, c := range p.conns {
		if i > 0 || !rd.fired.Load() { // else disarm sets it
			c.SetReadDeadline(t)
		}
	}
	rd.imu.Unlock()
	p.kickReader()
}

// waitRecv is Wait for a receive from p.
func (p *peer) waitRecv(ctx context.Context, r *transport.PostedRecv) error {
	for !r.IsDone() && p.acquire(ctx, r) {
		again := p.readFor(ctx, r)
		p.release()
		if !again {
			break
		}
	}
	return r.Req.Wait(ctx)
}

// acquire takes the read token for a waiter on r. It returns false, without
// the token, if r completes or ctx ends first.
func (p *peer) acquire(ctx context.Context, r *transport.PostedRecv) bool {
	rd := &p.rd
	select {
	case <-rd.tok:
	default:
		rd.wanted.Add(1)
		defer rd.wanted.Add(-1)
		select {
		case <-rd.tok:
		case <-r.Done():
			return false
		case <-ctx.Done():
			return false
		}
	}
	rd.takes.Add(1)
	return true
}

// release gives up the token a waiter held: to readLoop if reading is left
// that no other waiter will do, else to anyone.
func (p *peer) release() {
	rd := &p.rd
	switch {
	case rd.dead.Load():
	case rd.f.striped:
		rd.bgTok <- struct{}{}
		return
	case rd.wanted.Load() > 0:
	case rd.f.active || rd.f.hdrN > 0 || p.br[0].Buffered() > 0 || rd.bgWants.Load():
		rd.bgTok <- struct{}{}
		return
	}
	rd.tok <- struct{}{}
}

// readFor reads frames, holding the token, until r completes, ctx ends or
// the link fails. It reports whether to take the token again and go on: it
// left a striped frame to readLoop.
func (p *peer) readFor(ctx context.Context, r *transport.PostedRecv) (again bool) {
	rd := &p.rd
	if rd.dead.Load() {
		return false
	}
	if p.polls {
		// spinReader arms it before a read that may block (armWait):
		// a receive that lands while the waiter polls costs no timer,
		// channel or callback.
		rd.wctx = ctx
	} else if ctx.Done() != nil {
		rd.stop = p.arm(ctx)
	}
	rd.spin = true
	// ctx is looked at after each frame that did not complete r, not
	// before the first (a clock read on the latency-bound path): a waiter
	// whose ctx has ended already reads at most what is there, since a
	// read that would block arms ctx first.
	for !r.IsDone() {
		err := p.readFrame(false)
		if err == nil {
			if !r.IsDone() && ctx.Err() != nil {
				break
			}
			continue
		}
		if err == errHandOff {
			again = true
		} else if !p.interrupted() {
			p.readFailed(err)
		} // else ctx ended: the frame is kept for the next holder
		break
	}
	rd.spin = false
	rd.wctx = nil
	if rd.stop != nil {
		rd.stop()
		rd.stop = nil
		p.disarm()
	}
	if !again && !rd.dead.Load() && !rd.f.active && rd.f.hdrN == 0 {
		p.drainBuffered()
	}
	return again && ctx.Err() == nil
}

// drainBuffered delivers the frames that are whole in the read buffer, so
// that no complete message waits there for a reader.
func (p *peer) drainBuffered() {
	br := p.br[0]
	for br.Buffered() >= headerLen {
		h, _ := br.Peek(headerLen)
		n := binary.LittleEndian.Uint64(h[8:])
		if n > uint64(br.Buffered()-headerLen) || p.striped(int(n)) {
			return
		}
		if err := p.readFrame(false); err != nil {
			p.readFailed(err)
			return
		}
	}
}

// armWait is called by the token holder before a read that may block: a
// waiter whose ctx is not armed yet arms it.
func (p *peer) armWait() {
	rd := &p.rd
	if ctx := rd.wctx; ctx != nil && rd.stop == nil && ctx.Done() != nil {
		rd.stop = p.arm(ctx)
	}
}

// arm makes ctx's end interrupt the token holder's reads (with a past read
// deadline) until disarm.
func (p *peer) arm(ctx context.Context) (stop func() bool) {
	rd := &p.rd
	rd.imu.Lock()
	rd.armSeq++
	seq := rd.armSeq
	rd.armed = true
	rd.imu.Unlock()
	return context.AfterFunc(ctx, func() {
		rd.imu.Lock()
		defer rd.imu.Unlock()
		if rd.armed && rd.armSeq == seq {
			rd.fired.Store(true)
			p.conns[0].SetReadDeadline(aLongTimeAgo)
		}
	})
}

// disarm undoes arm, and its deadline if it was set.
func (p *peer) disarm() {
	rd := &p.rd
	rd.imu.Lock()
	defer rd.imu.Unlock()
	rd.armed = false
	if rd.fired.Load() {
		rd.fired.Store(false)
		p.conns[0].SetReadDeadline(rd.deadline)
	}
}

// interrupted reports whether arm's deadline was set.
func (p *peer) interrupted() bool { return p.rd.fired.Load() }

// readFrame reads, or goes on reading, one frame and delivers it; the
// caller holds the token. On an error the frame's progress is kept, so
// that a read interrupted by a deadline can be resumed. A waiter (bg
// false) leaves a striped frame to readLoop: errHandOff.
func (p *peer) readFrame(bg bool) error {
	rd := &p.rd
	f := &rd.f
	br := p.br[0]
	if !f.active {
		for f.hdrN < headerLen {
			k, err := br.Read(rd.hdr[f.hdrN:])
			f.hdrN += k
			if err != nil && f.hdrN < headerLen {
				return err
			}
		}
		f.hdrN = 0
		tag := transport.Tag(binary.LittleEndian.Uint64(rd.hdr[0:]))
		n64 := binary.LittleEndian.Uint64(rd.hdr[8:])
		if tag == goodbyeTag && n64 == 0 {
			p.left.Store(true) // the EOF that follows is a departure, not a loss
			return nil
		}
		if n64 > uint64(p.e.maxMsg) {
			return fmt.Errorf("%w: frame of %d bytes exceeds the maximum %d", transport.ErrProtocol, n64, p.e.maxMsg)
		}
		n := int(n64)
		*f = frame{active: true, tag: tag, n: n}
		if p.striped(n) {
			f.striped = true
		} else if pr := p.e.m.Claim(p.rank, tag); pr == nil {
			f.dst = scratch.Get(n) // the matcher returns it to the pool
		} else {
			// On a length mismatch the common prefix is delivered, so the
			// receiver can read a header it shares with the sender.
			f.pr = pr
			k := min(n, len(pr.Buf()))
			f.dst, f.skip = pr.Buf()[:k], int64(n-k)
		}
	}
	if f.striped {
		if !bg {
			return errHandOff
		}
		tag, n := f.tag, f.n
		*f = frame{}
		return p.readStriped(tag, n)
	}
	for f.got < len(f.dst) {
		k, err := io.ReadFull(br, f.dst[f.got:])
		f.got += k
		if err != nil {
			return err
		}
	}
	for f.skip > 0 {
		k, err := io.CopyN(io.Discard, br, f.skip)
		f.skip -= k
		if err != nil {
			return err
		}
	}
	done := *f
	*f = frame{}
	switch {
	case done.pr == nil:
		p.e.m.DeliverOwned(p.rank, done.tag, done.dst) // an aborted matcher drops it
	case len(done.pr.Buf()) != done.n:
		done.pr.Complete(transport.LengthError(p.rank, len(done.pr.Buf()), done.n))
	default:
		done.pr.Complete(nil)
	}
	return nil
}

// readFailed ends reading after err broke the link; the caller holds the
// token. The receive being filled fails, and later holders read nothing.
func (p *peer) readFailed(err error) {
	rd := &p.rd
	if rd.f.pr != nil {
		rd.f.pr.Complete(p.recvErr(err))
	}
	rd.f = frame{}
	rd.dead.Store(true)
	p.fail("recv", err)
}

// readLoop is the peer's background reader: it holds the token while no
// one else wants it, and reads.
func (p *peer) readLoop() {
	rd := &p.rd
	t := time.NewTimer(readIdle)
	t.Stop()
	held := true // the token starts here
	for {
		if held {
			rd.bgWants.Store(false)
			ok := p.readUnwanted()
			rd.tok <- struct{}{}
			if !ok {
				return
			}
		}
		if held = p.idle(t); !held {
			break
		}
	}
	// The endpoint is shutting down: wait for the holder, fail a frame
	// left half read and stop later holders from reading.
	select {
	case <-rd.tok:
	case <-rd.bgTok:
	}
	if rd.f.pr != nil {
		rd.f.pr.Complete(p.recvErr(net.ErrClosed))
	}
	rd.f = frame{}
	rd.dead.Store(true)
	rd.tok <- struct{}{}
}

// readUnwanted reads frames until a waiter wants the token (at a frame
// boundary) or the link fails (it returns false).
func (p *peer) readUnwanted() bool {
	rd := &p.rd
	for rd.f.active || rd.wanted.Load() == 0 {
		if rd.dead.Load() {
			return false
		}
		if err := p.readFrame(true); err != nil {
			p.readFailed(err)
			return false
		}
	}
	return true
}

// idle waits until readLoop should hold the token again: it was handed
// over, or it has lain unused for readIdle. It returns false, without the
// token, when the peer shuts down.
func (p *peer) idle(t *time.Timer) bool {
	rd := &p.rd
	last, wait := rd.takes.Load(), readIdle
	t.Reset(wait)
	defer t.Stop()
	for {
		select {
		case <-rd.bgTok:
			return true
		case <-p.quit:
			return false
		case <-t.C:
			if n := rd.takes.Load(); n != last {
				// Waiters use it: leave it to the next.
				last, wait = n, readIdle
			} else {
				select {
				case <-rd.tok:
					return true
				default:
					// A waiter holds it and reads, perhaps for long:
					// look less often.
					wait = min(2*wait, 32*readIdle)
				}
			}
			t.Reset(wait)
		}
	}
}

// spinReader is what the bufio.Reader of conns[0] reads from when that is
// a plain socket. A waiter holding the token that finds the socket empty
// polls it with non-blocking reads for a while before it sleeps in the
// network poller: on an exchange of small messages the answer comes within
// microseconds, and a thread that is still running takes it without the
// wake-up of a sleeping one on either side (the exchange takes half as
// long). On a machine with more runnable threads than cores, polling takes
// the core from someone, perhaps the peer; the link's transport.Spinner
// (Config.Spin, adapting as every transport's waiters do) stops it then.
type spinReader struct {
	c net.Conn
	p *peer
}

func (s *spinReader) Read(b []byte) (int, error) {
	rd := &s.p.rd
	if !rd.spin || len(b) == 0 {
		return s.c.Read(b)
	}
	if rd.spinner.Max() <= 0 {
		s.p.armWait()
		return s.c.Read(b)
	}
	// A first try reads no clock: on an exchange, where both ranks send
	// and then receive, the peer's bytes are usually there by the time
	// this rank's own write returns.
	n, st := s.tryRead(b)
	if st == readEmpty {
		if now := time.Now(); rd.spinner.Begin(now) > 0 {
			n, st = s.spin(b, now)
		}
	}
	switch st {
	case readGot:
		return n, nil
	case readEOF:
		return 0, io.EOF
	}
	s.p.armWait()
	return s.c.Read(b) // it waits, or says what went wrong
}

// spin polls for up to the spinner's time from now. Polls ask poll(2)
// before they read: a read of an empty socket takes the socket's lock,
// which the peer's write needs to deliver the bytes (over loopback the
// writer's CPU delivers them), so polling with reads slowed the delivery
// it waited for; poll takes no lock. Every 16 polls the waiter looks at
// its ctx, which is not armed while it polls, and yields the processor:
// with GOMAXPROCS 1 the goroutine that writes what this rank sends (the
// rest of a large inline write, sendLoop) runs only then. The polls come
// in batches of spinBatch, one RawConn.Read and one clock read a batch,
// so that a poll costs little more than its system call.
func (s *spinReader) spin(b []byte, now time.Time) (n, st int) {
	rd := &s.p.rd
	rd.tryPolls = spinBatch
	end, last, preempted := now.Add(rd.spinner.Max()), now, false
	yield := rd.spinner.Yields() // then every batch gives the core away, and losing it is no reason to stop
	st = readEmpty
	for i := 1; st == readEmpty && !s.p.interrupted(); i++ {
		if i%(16/spinBatch) == 0 || yield {
			if rd.wctx != nil && rd.wctx.Err() != nil {
				break
			}
			rd.spinner.Pass()
			last = time.Now() // the time another goroutine ran is not a lost core
		}
		t := time.Now()
		if t.Sub(last) > transport.SpinGap && !yield {
			preempted = true
			break
		}
		if t.After(end) {
			break
		}
		last = t
		n, st = s.tryRead(b)
	}
	rd.tryPolls = 0
	rd.spinner.End(last, st != readEmpty, preempted)
	return n, st
}

// spinBatch is how many polls spin makes between two looks at the clock.
const spinBatch = 4

// Outcomes of spinReader.tryRead.
const (
	readGot   = iota // n bytes
	readEmpty        // nothing to read now
	readEOF          // the peer closed its end
	readFail         // some error: the blocking read reports it
)

// tryRead is one non-blocking read.
func (s *spinReader) tryRead(b []byte) (n int, st int) {
	rd := &s.p.rd
	rd.tries++
	rd.tryBuf = b
	err := s.p.raw.Read(rd.tryFn)
	n, errno := rd.tryN, rd.tryErr
	rd.tryBuf, rd.tryErr = nil, nil
	switch {
	case err != nil:
		return 0, readFail
	case errno == unix.EAGAIN:
		return 0, readEmpty
	case errno != nil:
		return 0, readFail
	case n == 0:
		return 0, readEOF
	}
	return n, readGot
}

// readNow is tryRead's read, which RawConn.Read runs.
func (rd *reader) readNow(fd uintptr) bool {
	for i := 1; i <= rd.tryPolls; i++ {
		if readable(int(fd), &rd.pfd, &rd.zeroTS) {
			break // bytes, EOF or an error: the read says which
		}
		if i == rd.tryPolls {
			rd.tryN, rd.tryErr = -1, unix.EAGAIN
			return true
		}
	}
	rd.tryN, rd.tryErr = readNB(int(fd), rd.tryBuf)
	return true
}
