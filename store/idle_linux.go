//go:build linux

package store

import (
	"fmt"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// idleState is what a connection keeps for the idle poller: its raw
// descriptor (got once) and its key in the poller's set while parked.
type idleState struct {
	raw    syscall.RawConn
	idleID int32 // 0 while not parked; guarded by the poller's mu
}

// canPark reports whether c may wait for its next request at the idle
// poller. Only the standard socket types qualify: their Read reads the
// kernel's socket straight, so when its buffered reader is empty every
// byte of the next request is still in the kernel, where epoll sees it. A
// wrapped connection (TLS, or anything from a user's net.Listener) may
// hold bytes it has already read, which no poll of the descriptor would
// report; it keeps a goroutine blocked in Read, as before.
func canPark(c net.Conn) bool {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// wakeID keys the poller's eventfd in its epoll set; connections get keys
// from 1 up.
const wakeID = 0

// idlePoller is a Server's one goroutine for all its idle connections: it
// waits in epoll_wait on their descriptors, armed one-shot for input or
// hang-up, and gives a connection whose descriptor fires a serving
// goroutine again, which reads the request, or the end of the stream and
// ends the connection as it always has. An eventfd in the same set wakes
// it to stop.
type idlePoller struct {
	epfd int
	wake int // eventfd

	mu     sync.Mutex
	closed bool // no more parking
	done   bool // epfd and wake are closed
	next   int32
	conns  map[int32]*srvConn // parked, by key
	parks  int64              // parks so far
}

func newIdlePoller() (*idlePoller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("idle poller: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("idle poller: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeID}); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, fmt.Errorf("idle poller: epoll_ctl add eventfd: %w", err)
	}
	return &idlePoller{epfd: epfd, wake: wake, conns: make(map[int32]*srvConn)}, nil
}

// park adds sc, whose serving goroutine has found nothing to read, to the
// set. It reports false, leaving sc with its goroutine, when the poller is
// closed or the descriptor cannot be added (the connection is closed, or
// the kernel's epoll limits are reached).
func (p *idlePoller) park(sc *srvConn) bool {
	if sc.raw == nil {
		raw, err := sc.c.(syscall.Conn).SyscallConn()
		if err != nil {
			return false
		}
		sc.raw = raw
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	id := p.next
	for {
		if id++; id <= wakeID {
			id = wakeID + 1
		}
		if _, used := p.conns[id]; !used {
			break
		}
	}
	p.next = id
	var err error
	// Control holds the descriptor open while it runs: a Close racing with
	// it cannot free the number (and let another socket take it) under us.
	cerr := sc.raw.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: id}
		err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if cerr != nil || err != nil {
		return false
	}
	sc.idleID = id
	p.conns[id] = sc
	p.parks++
	return true
}

// take removes the connection keyed id from the set, if it is there, and
// its descriptor from the epoll set (it may be closed already: then it is
// out). Whoever takes a connection owns it. The caller holds p.mu, so
// epfd is open: run closes it only once the set is empty.
func (p *idlePoller) take(id int32) *srvConn {
	sc := p.conns[id]
	if sc == nil {
		return nil
	}
	delete(p.conns, id)
	sc.idleID = 0
	sc.raw.Control(func(fd uintptr) {
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
	return sc
}

// unpark gives sc a serving goroutine again if it is parked: its
// connection has been closed by another of its goroutines, which silently
// takes the descriptor out of the epoll set, so the poller would never
// hear of it.
func (p *idlePoller) unpark(sc *srvConn) {
	p.mu.Lock()
	var got *srvConn
	if sc.idleID != 0 && p.conns[sc.idleID] == sc {
		got = p.take(sc.idleID)
	}
	p.mu.Unlock()
	if got != nil {
		go got.resume()
	}
}

// close stops the poller: no connection parks from now on, and run
// resumes those parked (the Server has closed their sockets, so their
// goroutines end them) and returns. The wake is written under mu, so run,
// which closes the eventfd under mu, cannot have closed it yet.
func (p *idlePoller) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if !p.done {
		var one [8]byte
		one[0] = 1 // eventfd counters are host-endian; any non-zero value wakes
		unix.Write(p.wake, one[:])
	}
}

// parked returns how many connections wait at the poller.
func (p *idlePoller) parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// run is the poller's goroutine. It returns once close has been called (or
// epoll_wait fails, which only a bug can make it do), having resumed every
// parked connection.
func (p *idlePoller) run() {
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			n = 0
		}
		var woken []*srvConn
		p.mu.Lock()
		for _, ev := range events[:n] {
			if ev.Fd == wakeID {
				var b [8]byte
				unix.Read(p.wake, b[:])
				continue
			}
			// A key not in the set was taken by unpark since the event.
			if sc := p.take(ev.Fd); sc != nil {
				woken = append(woken, sc)
			}
		}
		stop := p.closed || err != nil
		if stop {
			p.closed = true
			for id := range p.conns {
				woken = append(woken, p.take(id))
			}
			p.done = true
			unix.Close(p.wake)
			unix.Close(p.epfd)
		}
		p.mu.Unlock()
		for _, sc := range woken {
			go sc.resume()
		}
		if stop {
			return
		}
	}
}
