package quiet

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The events a waiter arms: readable (or the peer's end, or an error),
// writable.
const (
	evRead  = unix.EPOLLIN | unix.EPOLLRDHUP
	evWrite = unix.EPOLLOUT
)

// Wrap takes c's socket out of the runtime's poller and returns it as a
// Conn; c is closed (the socket stays open under the Conn). On failure c
// is left as it was.
func Wrap(c *net.TCPConn) (net.Conn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("quiet: dup: %w", derr)
	}
	q := newConn(fd, c.LocalAddr(), c.RemoteAddr())
	if err := set.add(q); err != nil {
		unix.Close(fd)
		return nil, err
	}
	c.Close() // leaves the runtime's set; the duplicate keeps the socket
	if err := unix.SetNonblock(fd, true); err != nil {
		q.Close()
		return nil, fmt.Errorf("quiet: %w", err)
	}
	return q, nil
}

// epollSet is this package's epoll set and the goroutine that reports its
// events. It runs while any Conn is open. The goroutine waits for the set
// under the runtime's poller, which watches the set's descriptor (an epoll
// set is readable while it has events): it holds no thread and no P while
// it waits, and the runtime's poller hears of the set only when an armed
// socket is ready.
type epollSet struct {
	life  sync.Mutex // add and remove: start and stop
	epfd  int
	file  *os.File      // epfd, watched by the runtime's poller
	ended chan struct{} // closed when the goroutine has returned
	open  int
	next  uint64

	mu    sync.RWMutex
	conns map[uint64]*Conn
}

var set epollSet

// add puts c in the set, armed for nothing, starting the set if it is
// the first.
func (s *epollSet) add(c *Conn) error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.open == 0 {
		if err := s.start(); err != nil {
			return err
		}
	}
	s.next++
	c.id = s.next
	s.mu.Lock()
	s.conns[c.id] = c
	s.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT}
	setData(&ev, c.id)
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		s.mu.Lock()
		delete(s.conns, c.id)
		s.mu.Unlock()
		if s.open == 0 {
			s.stop()
		}
		return fmt.Errorf("quiet: epoll_ctl add: %w", err)
	}
	s.open++
	return nil
}

// remove takes c out of the set, stopping it if c was the last.
func (s *epollSet) remove(c *Conn) {
	s.life.Lock()
	defer s.life.Unlock()
	unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
	s.mu.Lock()
	delete(s.conns, c.id)
	s.mu.Unlock()
	if s.open--; s.open == 0 {
		s.stop()
	}
}

// arm asks for one report of events on c (with those already asked).
func (s *epollSet) arm(c *Conn, events uint32) error {
	c.armMu.Lock()
	defer c.armMu.Unlock()
	c.armed |= events
	ev := unix.EpollEvent{Events: c.armed | unix.EPOLLONESHOT}
	setData(&ev, c.id)
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		return fmt.Errorf("quiet: epoll_ctl mod: %w", err)
	}
	return nil
}

func (s *epollSet) start() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("quiet: epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil { // so that os.NewFile gives it to the poller
		unix.Close(epfd)
		return fmt.Errorf("quiet: %w", err)
	}
	f := os.NewFile(uintptr(epfd), "quiet-epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("quiet: %w", err)
	}
	s.epfd, s.file, s.ended = epfd, f, make(chan struct{})
	s.conns = make(map[uint64]*Conn)
	go s.run(rc, s.ended)
	return nil
}

// stop ends the goroutine and closes the set; s.life is held.
func (s *epollSet) stop() {
	s.file.Close() // the goroutine's wait fails
	<-s.ended
	s.epfd, s.file = -1, nil
}

// run reports the set's events until its descriptor is closed: it takes
// every event the set holds (epoll_wait with no timeout) and, when there
// is none, waits under the runtime's poller for the set to be readable.
func (s *epollSet) run(rc syscall.RawConn, ended chan struct{}) {
	defer close(ended)
	var evs [64]unix.EpollEvent
	for {
		err := rc.Read(func(fd uintptr) bool {
			n, err := unix.EpollWait(int(fd), evs[:], 0)
			if n <= 0 {
				return err != nil && err != unix.EINTR // an error: the next call says so
			}
			for i := range evs[:n] {
				s.mu.RLock()
				c := s.conns[data(&evs[i])]
				s.mu.RUnlock()
				if c != nil {
					c.report()
				}
			}
			return true
		})
		if err != nil {
			return // closed by stop
		}
	}
}

// report tells c's waiters that the set reported c: every direction that
// was armed is signalled, and c is armed for nothing until a waiter arms
// it again (EPOLLONESHOT has disarmed it in the kernel).
func (c *Conn) report() {
	c.armMu.Lock()
	armed := c.armed
	c.armed = 0
	c.armMu.Unlock()
	if armed&evRead != 0 {
		c.rd.signal()
	}
	if armed&evWrite != 0 {
		c.wr.signal()
	}
}

// An event's 8 bytes of data (Fd and Pad in x/sys) carry a Conn's id.
func setData(ev *unix.EpollEvent, id uint64) {
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32))
}

func data(ev *unix.EpollEvent) uint64 { return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32 }

func readFD(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return max(n, 0), err
		}
	}
}

func writevFD(fd int, bufs [][]byte) (int, error) {
	if len(bufs) > 1024 { // IOV_MAX
		bufs = bufs[:1024]
	}
	for {
		n, err := unix.Writev(fd, bufs)
		if err != unix.EINTR {
			return max(n, 0), err
		}
	}
}

func closeFD(fd int) error { return unix.Close(fd) }
