package tcp

import (
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// readBufSize is the read buffer of a link while it has traffic.
const readBufSize = 64 << 10

// readBufs holds the read buffers of links that have none of their own
// at the moment.
var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// bufReader is the part of bufio.Reader that the frame reader uses, with
// a buffer that a link holds only while it has traffic: none until the
// first byte arrives, and, when it can wait for bytes without one (wait
// not nil), none while it is idle, since it gives the buffer back to a
// pool each time it has handed out every byte in it and blocks in wait,
// not in a read, until more come. So a thousand idle links hold no 64
// KiB each. Like bufio.Reader it is not safe for concurrent use: its one
// user is whoever holds the link's read token.
type bufReader struct {
	src  io.Reader
	wait func() error // blocks until src has bytes (or an error); nil: keep the buffer
	buf  *[]byte      // nil: none held
	r, w int
	held *atomic.Int64 // the endpoint's count of buffers held
}

func newBufReader(src io.Reader, wait func() error, held *atomic.Int64) *bufReader {
	return &bufReader{src: src, wait: wait, held: held}
}

// Buffered returns the number of bytes that can be read without reading
// from src.
func (b *bufReader) Buffered() int { return b.w - b.r }

// Peek returns the next n bytes without consuming them; it never reads
// from src, and returns io.ErrNoProgress when fewer are buffered.
func (b *bufReader) Peek(n int) ([]byte, error) {
	if b.w-b.r < n {
		return nil, io.ErrNoProgress
	}
	return (*b.buf)[b.r : b.r+n], nil
}

// Read reads into p: from the buffer when it holds bytes, else straight
// from src when p is at least as large as the buffer, else through the
// buffer with one read from src.
func (b *bufReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if len(p) >= readBufSize {
			return b.src.Read(p)
		}
		if b.buf == nil {
			if b.wait != nil {
				if err := b.wait(); err != nil {
					return 0, err
				}
			}
			b.buf = readBufs.Get().(*[]byte)
			b.held.Add(1)
		}
		n, err := b.src.Read(*b.buf)
		b.r, b.w = 0, n
		if n == 0 {
			b.release()
			return 0, err
		}
	}
	n := copy(p, (*b.buf)[b.r:b.w])
	b.r += n
	b.release()
	return n, nil
}

// release gives the buffer back when it is empty and the link can wait
// without one.
func (b *bufReader) release() {
	if b.r == b.w && b.buf != nil && b.wait != nil {
		readBufs.Put(b.buf)
		b.held.Add(-1)
		b.buf, b.r, b.w = nil, 0, 0
	}
}

// awaitReadable blocks until p's first connection has bytes to read, has
// reached its end or failed, or its read deadline passes (that error is
// returned), holding no buffer: a peek at one byte that does not wait,
// under the runtime's poller.
func (p *peer) awaitReadable() error {
	if p.rd.spin {
		return nil // a waiter polls for the bytes: leave the wait to it
	}
	var one [1]byte
	return p.raw.Read(func(fd uintptr) bool {
		for {
			_, _, errno := unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if errno != unix.EINTR {
				return errno != unix.EAGAIN
			}
		}
	})
}
