package devpath

import (
	"context"
	"fmt"
	"sync"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
)

// request is an Isend or Irecv of several chunks.
type request struct {
	mu   sync.Mutex
	left int
	err  error
	done chan struct{}
}

func (r *request) chunkDone(err error) {
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

func (r *request) Wait(ctx context.Context) error {
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
// or, with ipc, a whole message between ranks of one host (ipc.go).
type chunk struct {
	req  *request
	buf  device.Buffer
	off  int
	host []byte
	n    int
	ipc  bool
}

// lane moves the chunks to or from one peer, in order, at most laneSlots at
// a time.
type lane struct {
	p    *Peers
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
// laneSlots chunks, so that at most that many slots are taken.
func (l *lane) start() {
	p := l.p
	ch := make(chan inFlight, laneSlots-1)
	slots := make(chan struct{}, laneSlots)
	for range laneSlots {
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
	for got := 0; got < laneSlots; got++ {
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
		for range laneSlots {
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
			if f.ev, f.err = p.d.Event(); f.err == nil {
				if f.err = s.CopyToHost(f.mem, c.buf, c.off); f.err == nil {
					f.err = s.Record(f.ev)
				}
			}
		}
		return f
	}
	p.mu.Lock()
	f.r = p.link.Irecv(l.peer, f.mem)
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
			p.d.PutEvent(f.ev)
		}
		if err := p.failed(); err != nil {
			return err // nothing goes on the wire for a call that has failed
		}
		p.mu.Lock()
		r := p.link.Isend(l.peer, f.mem)
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
