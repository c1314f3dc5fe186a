//go:build linux

package quiet

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Conn is a TCP connection whose socket the runtime's poller does not
// watch. It implements net.Conn and syscall.Conn; its RawConn's Read and
// Write wait for the socket as a net.Conn's do.
type Conn struct {
	fd            int
	id            uint64 // its key in the epoll set
	local, remote net.Addr

	closed atomic.Bool
	done   chan struct{} // closed by Close: every waiter wakes
	life   sync.RWMutex  // read-held by each operation, held by Close to close fd

	rd, wr direction

	armMu sync.Mutex
	armed uint32 // the epoll events the waiters asked for, until reported
}

// direction is the state of one side, read or write.
type direction struct {
	mu       sync.Mutex    // held by the one operation in progress
	sig      chan struct{} // capacity 1: the set, a new deadline or Close
	deadline atomic.Int64  // UnixNano; 0: none
	timer    *time.Timer   // the waiter's, made on its first deadline
}

func newConn(fd int, local, remote net.Addr) *Conn {
	c := &Conn{fd: fd, local: local, remote: remote, done: make(chan struct{})}
	c.rd.sig = make(chan struct{}, 1)
	c.wr.sig = make(chan struct{}, 1)
	return c
}

// signal wakes d's waiter, if any, or the next one to look.
func (d *direction) signal() {
	select {
	case d.sig <- struct{}{}:
	default:
	}
}

// expired reports whether d's deadline has passed.
func (d *direction) expired() bool {
	dl := d.deadline.Load()
	return dl != 0 && time.Now().UnixNano() >= dl
}

func (d *direction) setDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = max(t.UnixNano(), 1)
	}
	d.deadline.Store(ns)
	d.signal()
}

// check says why an operation on d cannot go on: the Conn is closed or
// d's deadline has passed.
func (c *Conn) check(d *direction) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	if d.expired() {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// wait parks until the socket may be ready for d (events), the deadline
// passes, d is signalled or c is closed; the caller tries again and
// checks.
func (c *Conn) wait(d *direction, events uint32) error {
	select {
	case <-d.sig: // stale: taken before arming
	default:
	}
	if err := c.check(d); err != nil {
		return err
	}
	var timeout <-chan time.Time
	if dl := d.deadline.Load(); dl != 0 {
		left := time.Until(time.Unix(0, dl))
		if d.timer == nil {
			d.timer = time.NewTimer(left)
		} else {
			d.timer.Reset(left)
		}
		timeout = d.timer.C
	}
	if err := set.arm(c, events); err != nil {
		return err
	}
	select {
	case <-d.sig:
	case <-timeout:
	case <-c.done:
	}
	if timeout != nil {
		d.timer.Stop()
	}
	return nil
}

// Read reads as a net.Conn's Read does.
func (c *Conn) Read(b []byte) (int, error) {
	c.life.RLock()
	defer c.life.RUnlock()
	c.rd.mu.Lock()
	defer c.rd.mu.Unlock()
	for {
		if err := c.check(&c.rd); err != nil {
			return 0, c.opError("read", err)
		}
		if len(b) == 0 {
			return 0, nil
		}
		n, err := readFD(c.fd, b)
		switch {
		case err == nil && n == 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err != syscall.EAGAIN:
			return 0, c.opError("read", os.NewSyscallError("read", err))
		}
		if err := c.wait(&c.rd, evRead); err != nil {
			return 0, c.opError("read", err)
		}
	}
}

// Write writes all of b, as a net.Conn's Write does.
func (c *Conn) Write(b []byte) (int, error) {
	bufs := net.Buffers{b}
	n, err := c.WriteBuffers(&bufs)
	return int(n), err
}

// WriteBuffers writes all of *bufs with writev, consuming them as
// net.Buffers.WriteTo does (which cannot reach writev through a Conn).
func (c *Conn) WriteBuffers(bufs *net.Buffers) (int64, error) {
	c.life.RLock()
	defer c.life.RUnlock()
	c.wr.mu.Lock()
	defer c.wr.mu.Unlock()
	var total int64
	for {
		for len(*bufs) > 0 && len((*bufs)[0]) == 0 {
			*bufs = (*bufs)[1:]
		}
		if len(*bufs) == 0 {
			return total, nil // all written: a Close since then does not undo it
		}
		if err := c.check(&c.wr); err != nil {
			return total, c.opError("write", err)
		}
		n, err := writevFD(c.fd, *bufs)
		if n > 0 {
			total += int64(n)
			consume(bufs, n)
		}
		if afterWrite != nil {
			afterWrite(c)
		}
		switch {
		case err == nil:
			continue
		case err != syscall.EAGAIN:
			return total, c.opError("write", os.NewSyscallError("writev", err))
		}
		if err := c.wait(&c.wr, evWrite); err != nil {
			return total, c.opError("write", err)
		}
	}
}

// Close closes the connection: operations in progress and later ones
// fail with net.ErrClosed.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return c.opError("close", net.ErrClosed)
	}
	close(c.done)
	c.life.Lock() // every operation has left
	defer c.life.Unlock()
	set.remove(c)
	return os.NewSyscallError("close", closeFD(c.fd))
}

func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

func (c *Conn) SetDeadline(t time.Time) error {
	c.rd.setDeadline(t)
	c.wr.setDeadline(t)
	return nil
}

func (c *Conn) SetReadDeadline(t time.Time) error  { c.rd.setDeadline(t); return nil }
func (c *Conn) SetWriteDeadline(t time.Time) error { c.wr.setDeadline(t); return nil }

// SyscallConn returns the socket for raw operations.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return rawConn{c}, nil }

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
}

// rawConn is a Conn's syscall.RawConn.
type rawConn struct{ c *Conn }

func (r rawConn) Control(f func(fd uintptr)) error {
	c := r.c
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed.Load() {
		return c.opError("raw-control", net.ErrClosed)
	}
	f(uintptr(c.fd))
	return nil
}

// Read calls f until it returns true, waiting between calls until the
// socket may be readable, as a net.Conn's RawConn does.
func (r rawConn) Read(f func(fd uintptr) bool) error {
	return r.c.raw("raw-read", &r.c.rd, evRead, f)
}

// Write calls f until it returns true, waiting between calls until the
// socket may be writable.
func (r rawConn) Write(f func(fd uintptr) bool) error {
	return r.c.raw("raw-write", &r.c.wr, evWrite, f)
}

func (c *Conn) raw(op string, d *direction, events uint32, f func(fd uintptr) bool) error {
	c.life.RLock()
	defer c.life.RUnlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		if err := c.check(d); err != nil {
			return c.opError(op, err)
		}
		if f(uintptr(c.fd)) {
			return nil
		}
		if err := c.wait(d, events); err != nil {
			return c.opError(op, err)
		}
	}
}

// afterWrite, if set (tests), runs after each writev of WriteBuffers.
var afterWrite func(*Conn)

// consume drops the first n bytes of *bufs.
func consume(bufs *net.Buffers, n int) {
	for n > 0 {
		b := (*bufs)[0]
		if n < len(b) {
			(*bufs)[0] = b[n:]
			return
		}
		n -= len(b)
		(*bufs)[0] = nil
		*bufs = (*bufs)[1:]
	}
}
