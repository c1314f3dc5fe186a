package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/internal/scratch"
)

// Matcher pairs incoming messages with posted receives, the way MPI's
// matching engine does, for one endpoint. For every (peer, tag) it keeps a
// FIFO of posted receives and a FIFO of unexpected messages; at most one of
// the two is non-empty at any time. A message that finds a posted receive is
// copied straight into the receiver's buffer; otherwise it waits in the
// unexpected queue until Post takes it.
//
// State is sharded per peer, so that readers for different peers never
// contend. All methods are safe for concurrent use. Copies into posted
// buffers happen under the peer's lock, so once Abort or FailPeer has
// returned no buffer handed to Post or DeliverRef is touched again
// (except by a caller that took a receive out with Claim, which owns it).
type Matcher struct {
	peers []peerState
	hooks atomic.Pointer[strayHooks] // set by SetStray, possibly after traffic began
	spin  atomic.Pointer[Spinner]    // set by SetSpin
}

// SetSpin makes waits on posted receives poll with s before they park
// (nil: park at once, the default). A transport whose messages are
// delivered by a goroutine that is likely running (transport/mem) sets
// it, so that a short wait costs no goroutine wake-up.
func (m *Matcher) SetSpin(s *Spinner) { m.spin.Store(s) }

type strayHooks struct {
	finished func(Tag) bool
	report   func(from int, tag Tag, head []byte)
}

// SetStray sets the test for finished tags and the report of messages
// dropped because of it (see StrayReporter). Messages that arrived before
// it are not looked at until Retire.
func (m *Matcher) SetStray(finished func(Tag) bool, report func(from int, tag Tag, head []byte)) {
	m.hooks.Store(&strayHooks{finished, report})
}

// Retire drops the messages queued under tag from every peer and reports
// each (see StrayReporter).
func (m *Matcher) Retire(tag Tag) {
	h := m.hooks.Load()
	if h == nil {
		return
	}
	for from := range m.peers {
		p := &m.peers[from]
		if p.queued.Load() == 0 {
			continue // a message queued after this look is judged on arrival (finished)
		}
		p.mu.Lock()
		q := p.tags[tag]
		if q == nil || q.unexp.len() == 0 {
			p.mu.Unlock()
			continue
		}
		var strays []message
		for q.unexp.len() > 0 {
			strays = append(strays, q.unexp.pop())
			p.queued.Add(-1)
		}
		p.release(tag, q)
		p.mu.Unlock()
		for _, msg := range strays {
			h.stray(from, tag, msg)
		}
	}
}

// stray reports a dropped message and lets go of its bytes.
func (h *strayHooks) stray(from int, tag Tag, msg message) {
	head := append([]byte(nil), msg.data[:min(len(msg.data), StrayHead)]...)
	switch {
	case msg.done != nil:
		msg.done(nil) // the sender's part is over; the report says the rest
	case msg.owned:
		scratch.Put(msg.data)
	}
	h.report(from, tag, head)
}

type peerState struct {
	mu     sync.Mutex
	tags   map[Tag]*tagQueue
	free   []*tagQueue   // recycled empty queues
	recvs  []*PostedRecv // released receives, for reuse
	failed error         // set by FailPeer: no more messages will come
	closed error         // set by Abort: nothing is delivered any more
	// queued counts the unexpected messages held (changed under mu), so
	// that Retire passes a peer with none without taking its lock: at
	// thousands of ranks a lock per peer per call adds up.
	queued atomic.Int32
}

type tagQueue struct {
	posted fifo[*PostedRecv]
	unexp  fifo[message]
}

// message is an unexpected message. When done is nil the matcher owns data;
// otherwise data is borrowed (rendezvous) and done is called exactly once
// when it has been consumed (nil) or dropped (the reason).
type message struct {
	data []byte
	done func(error)
	// owned: data belongs to the matcher (a copy, or a buffer handed over
	// with DeliverOwned), from the scratch pool, and goes back to it once
	// copied into a receive.
	owned bool
}

// PostedRecv is a receive waiting in a Matcher. A transport that takes one
// out with Claim fills Buf and calls Complete.
//
// A PostedRecv is recycled once its owner calls Release: see
// Releaser. Only a request that completed is reused, so a transport that
// claimed one must not touch it after Complete.
type PostedRecv struct {
	Req
	buf  []byte
	vec  *[][]byte // a vectored receive's pieces (PostV), behind a pointer so that a plain receive stays in the 80-byte size class; buf is nil then
	peer int
	m    *Matcher
}

var _ Releaser = (*PostedRecv)(nil)

// Wait implements Request. With a spin policy set (SetSpin) it polls for
// the completion for a while before it parks.
func (r *PostedRecv) Wait(ctx context.Context) error {
	if s := r.m.spin.Load(); s != nil && !r.done() {
		s.Wait(r.done)
	}
	return r.Req.Wait(ctx)
}

// Release implements Releaser: a completed receive goes back to its
// matcher for a later Post; a pending one is left alone.
func (r *PostedRecv) Release() {
	if !r.done() {
		return
	}
	p := &r.m.peers[r.peer]
	r.buf, r.vec, r.err = nil, nil, nil
	r.claimed.Store(false)
	r.wake.Store(nil)
	p.mu.Lock()
	if len(p.recvs) < maxFreeRecvs {
		p.recvs = append(p.recvs, r)
	}
	p.mu.Unlock()
}

// maxFreeRecvs bounds the released receives a peer keeps for reuse.
const maxFreeRecvs = 64

// Buf is the receiver's buffer: the message must be exactly len(Buf())
// bytes. It is nil for a vectored receive (PostV): see Bufs.
func (r *PostedRecv) Buf() []byte { return r.buf }

// Bufs is a vectored receive's pieces (PostV), in order, or nil for a
// receive of one buffer (Buf). Only a transport that posts vectored
// receives meets one in Claim.
func (r *PostedRecv) Bufs() [][]byte {
	if r.vec == nil {
		return nil
	}
	return *r.vec
}

// Len is the length the message must have: len(Buf()), or the pieces'
// total.
func (r *PostedRecv) Len() int {
	if r.vec != nil {
		return VecLen(*r.vec)
	}
	return len(r.buf)
}

// fill copies data into the receive's buffer or pieces, as far as they
// go.
func (r *PostedRecv) fill(data []byte) {
	if r.vec != nil {
		Scatter(*r.vec, data)
		return
	}
	copy(r.buf, data)
}

// readFull reads the first k bytes of the receive's buffer or pieces
// from src.
func (r *PostedRecv) readFull(src io.Reader, k int) error {
	if r.vec == nil {
		_, err := io.ReadFull(src, r.buf[:k])
		return err
	}
	for _, b := range *r.vec {
		if k == 0 {
			break
		}
		b = b[:min(k, len(b))]
		if _, err := io.ReadFull(src, b); err != nil {
			return err
		}
		k -= len(b)
	}
	return nil
}

// boxed puts a vectored receive's pieces behind a pointer (nil for none):
// allocated only for a vectored receive, never for a plain one.
func boxed(vec [][]byte) *[][]byte {
	if vec == nil {
		return nil
	}
	v := new([][]byte)
	*v = vec
	return v
}

// NewMatcher returns a Matcher for an endpoint of a job with size ranks.
func NewMatcher(size int) *Matcher {
	m := &Matcher{peers: make([]peerState, size)}
	for i := range m.peers {
		m.peers[i].tags = make(map[Tag]*tagQueue)
	}
	return m
}

// LengthError returns the error a receive fails with when the message from
// peer is got bytes long but the receive expected want. Its cause is a
// *LengthMismatch.
func LengthError(peer, want, got int) error {
	return &PeerError{Op: "recv", Peer: peer, Err: &LengthMismatch{Got: got, Want: want}}
}

// LengthMismatch is why a receive failed whose message had another length
// than its buffer. errors.Is finds ErrProtocol and ErrLength in it.
type LengthMismatch struct {
	Got, Want int // bytes in the message, bytes in the receive buffer
}

func (e *LengthMismatch) Error() string {
	return fmt.Sprintf("%v: %v: message of %d bytes, receive buffer of %d bytes", ErrProtocol, ErrLength, e.Got, e.Want)
}

func (e *LengthMismatch) Unwrap() []error { return []error{ErrProtocol, ErrLength} }

func (p *peerState) queue(tag Tag) *tagQueue {
	q := p.tags[tag]
	if q == nil {
		if n := len(p.free); n > 0 {
			q = p.free[n-1]
			p.free = p.free[:n-1]
		} else {
			q = new(tagQueue)
		}
		p.tags[tag] = q
	}
	return q
}

// release drops q from the map when it is empty, keeping it for reuse.
func (p *peerState) release(tag Tag, q *tagQueue) {
	if q.posted.len() == 0 && q.unexp.len() == 0 {
		delete(p.tags, tag)
		if len(p.free) < 64 {
			q.posted.reset()
			q.unexp.reset()
			p.free = append(p.free, q)
		}
	}
}

// Post starts a receive of the next message from peer under tag into buf.
func (m *Matcher) Post(from int, tag Tag, buf []byte) Request {
	return m.post(from, tag, buf, nil)
}

// PostV starts a vectored receive (VecEndpoint.IrecvV) of the next
// message from peer under tag into bufs, in order. A transport that
// posts one must handle Bufs in what it Claims; the Deliver methods and
// DeliverFrom handle it themselves.
func (m *Matcher) PostV(from int, tag Tag, bufs [][]byte) Request {
	if bufs == nil {
		bufs = [][]byte{}
	}
	return m.post(from, tag, nil, bufs)
}

func (m *Matcher) post(from int, tag Tag, buf []byte, vec [][]byte) Request {
	if err := CheckPeer("recv", from, len(m.peers)); err != nil {
		return Completed(err)
	}
	p := &m.peers[from]
	p.mu.Lock()
	if p.closed != nil {
		err := p.closed
		p.mu.Unlock()
		return Completed(err)
	}
	if q := p.tags[tag]; q != nil && q.unexp.len() > 0 {
		msg := q.unexp.pop()
		p.queued.Add(-1)
		p.release(tag, q)
		var err error
		want := len(buf)
		if vec != nil {
			want = VecLen(vec)
			Scatter(vec, msg.data) // on a length mismatch, the common prefix
		} else {
			copy(buf, msg.data)
		}
		if len(msg.data) != want {
			err = LengthError(from, want, len(msg.data))
		}
		p.mu.Unlock()
		if msg.owned {
			scratch.Put(msg.data)
		}
		if msg.done != nil {
			msg.done(nil)
		}
		return Completed(err)
	}
	if p.failed != nil {
		err := p.failed
		p.mu.Unlock()
		return Completed(err)
	}
	var r *PostedRecv
	if n := len(p.recvs); n > 0 {
		r = p.recvs[n-1]
		p.recvs[n-1] = nil
		p.recvs = p.recvs[:n-1]
		r.buf, r.vec = buf, boxed(vec)
	} else {
		r = &PostedRecv{buf: buf, vec: boxed(vec), peer: from, m: m}
	}
	p.queue(tag).posted.push(r)
	p.mu.Unlock()
	return r
}

// Claim removes and returns the oldest receive posted for (from, tag), or
// nil if there is none. The caller then owns it: it must fill r.Buf() (or
// fail it with LengthError) and call r.Complete. A transport's reader uses
// Claim to read a payload from the socket straight into the user's buffer.
// Only one goroutine at a time may deliver a peer's messages, so that Claim
// and DeliverOwned see them in order; transport/tcp passes a read token
// between the goroutines that read a peer's socket.
func (m *Matcher) Claim(from int, tag Tag) *PostedRecv {
	p := &m.peers[from]
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.tags[tag]
	if q == nil || q.posted.len() == 0 {
		return nil
	}
	r := q.posted.pop()
	p.release(tag, q)
	return r
}

// Deliver hands the matcher a message from peer under tag whose bytes the
// caller keeps: it is copied into the oldest posted receive, or into a new
// buffer in the unexpected queue. It returns an error, and drops the
// message, if the matcher was aborted.
func (m *Matcher) Deliver(from int, tag Tag, data []byte) error {
	return m.deliver(from, tag, data, true, nil)
}

// DeliverOwned is Deliver for a buffer the caller gives up: if no receive
// is posted, data itself is queued without a copy. data should come from
// scratch.Get (internal/scratch): the matcher returns it to the pool once
// its bytes are in a receive, so that a steady stream of early messages
// does not make garbage. (A buffer from elsewhere is pooled only if its
// capacity is a power of two, and is safe either way: the caller gave it
// up.)
func (m *Matcher) DeliverOwned(from int, tag Tag, data []byte) error {
	return m.deliver(from, tag, data, false, nil)
}

// DeliverRef delivers a message whose bytes are borrowed until done is
// called (rendezvous). done is called exactly once: with nil after the data
// was copied into a receive (possibly before DeliverRef returns), or with
// the reason if the message is dropped (Abort, FailPeer, or the matcher was
// already aborted, in which case DeliverRef also returns that error).
func (m *Matcher) DeliverRef(from int, tag Tag, data []byte, done func(error)) error {
	return m.deliver(from, tag, data, false, done)
}

func (m *Matcher) deliver(from int, tag Tag, data []byte, mustCopy bool, done func(error)) error {
	p := &m.peers[from]
	p.mu.Lock()
	if p.closed != nil {
		err := p.closed
		p.mu.Unlock()
		if done != nil {
			done(err)
		}
		return err
	}
	q := p.queue(tag)
	if q.posted.len() > 0 {
		r := q.posted.pop()
		p.release(tag, q)
		var err error
		r.fill(data) // on a length mismatch, the common prefix
		if want := r.Len(); want != len(data) {
			err = LengthError(from, want, len(data))
		}
		p.mu.Unlock()
		r.Complete(err)
		if done != nil {
			done(nil)
		} else if !mustCopy {
			scratch.Put(data) // DeliverOwned's buffer, copied
		}
		return nil
	}
	// Counted before the look at finished: a Retire that saw no message
	// queued looked before this count, so after the tag was finished,
	// and the look below sees that.
	p.queued.Add(1)
	if h := m.hooks.Load(); h != nil && h.finished(tag) {
		p.queued.Add(-1)
		p.release(tag, q)
		p.mu.Unlock()
		h.stray(from, tag, message{data: data, done: done, owned: done == nil && !mustCopy})
		return nil
	}
	if mustCopy {
		data = append(scratch.Get(len(data))[:0], data...)
	}
	q.unexp.push(message{data: data, done: done, owned: done == nil})
	p.mu.Unlock()
	return nil
}

// DeliverFrom reads a message of n bytes from peer under tag out of r. If a
// receive is posted the payload is read straight into its buffer; otherwise
// into a new buffer that joins the unexpected queue. A length mismatch
// fails the receive (the common prefix is delivered, the rest discarded) and is not an error
// of DeliverFrom: the stream is still in step. DeliverFrom returns an error
// only when reading r fails; a claimed receive is then failed with fail(err).
func (m *Matcher) DeliverFrom(from int, tag Tag, n int, r io.Reader, fail func(error) error) error {
	if pr := m.Claim(from, tag); pr != nil {
		if want := pr.Len(); want != n {
			// Deliver the common prefix, so the receiver can read a header
			// it shares with the sender, and discard the rest.
			k := min(n, want)
			err := pr.readFull(r, k)
			if err == nil {
				_, err = io.CopyN(io.Discard, r, int64(n-k))
			}
			if err != nil {
				pr.Complete(fail(err))
				return err
			}
			pr.Complete(LengthError(from, want, n))
			return nil
		}
		if err := pr.readFull(r, n); err != nil {
			pr.Complete(fail(err))
			return err
		}
		pr.Complete(nil)
		return nil
	}
	buf := scratch.Get(n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	_ = m.DeliverOwned(from, tag, buf) // an aborted matcher drops it
	return nil
}

// FailPeer records that no more messages will come from peer: receives
// posted for it fail with err, and so do later ones once the messages that
// already arrived from it are consumed. Borrowed (rendezvous) messages from
// it are dropped, their done called with err. Only the first call counts.
func (m *Matcher) FailPeer(peer int, err error) {
	p := &m.peers[peer]
	p.mu.Lock()
	if p.failed != nil || p.closed != nil {
		p.mu.Unlock()
		return
	}
	p.failed = err
	var fail []*PostedRecv
	var drop []func(error)
	for tag, q := range p.tags {
		for q.posted.len() > 0 {
			fail = append(fail, q.posted.pop())
		}
		before := q.unexp.len()
		keep := q.unexp.items[:0]
		for _, msg := range q.unexp.live() {
			if msg.done != nil {
				drop = append(drop, msg.done)
			} else {
				keep = append(keep, msg)
			}
		}
		clear(q.unexp.items[len(keep):])
		q.unexp.items, q.unexp.head = keep, 0
		p.queued.Add(int32(len(keep) - before))
		p.release(tag, q)
	}
	p.mu.Unlock()
	for _, r := range fail {
		r.Complete(err)
	}
	for _, d := range drop {
		d(err)
	}
}

// Abort fails every pending receive with err and drops every queued
// message; later Posts fail at once with err and later deliveries are
// dropped. Only the first call counts. When Abort returns no posted buffer
// is written by the matcher again.
func (m *Matcher) Abort(err error) {
	if err == nil {
		err = errors.New("transport: matcher aborted")
	}
	for i := range m.peers {
		p := &m.peers[i]
		p.mu.Lock()
		if p.closed != nil {
			p.mu.Unlock()
			continue
		}
		p.closed = err
		var fail []*PostedRecv
		var drop []func(error)
		for _, q := range p.tags {
			fail = append(fail, q.posted.live()...)
			for _, msg := range q.unexp.live() {
				if msg.done != nil {
					drop = append(drop, msg.done)
				}
			}
		}
		p.tags = map[Tag]*tagQueue{}
		p.free = nil
		p.mu.Unlock()
		for _, r := range fail {
			r.Complete(err)
		}
		for _, d := range drop {
			d(err)
		}
	}
}

// fifo is a slice-backed queue that reuses its array once drained.
type fifo[T any] struct {
	items []T
	head  int
}

func (f *fifo[T]) len() int  { return len(f.items) - f.head }
func (f *fifo[T]) push(v T)  { f.items = append(f.items, v) }
func (f *fifo[T]) live() []T { return f.items[f.head:] }
func (f *fifo[T]) reset()    { clear(f.items); f.items, f.head = f.items[:0], 0 }
func (f *fifo[T]) pop() T {
	var zero T
	v := f.items[f.head]
	f.items[f.head] = zero
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	}
	return v
}
