package main

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// exchange is one end of the exchange limit: iters times, write n bytes
// to c, then poll the socket and read until the peer's n bytes of this
// round are in, the pattern of a 2-rank 8-byte allreduce with nothing
// around it: no framing, no matching, no call. A read that takes more
// than one round's bytes counts them for the next round, as a frame
// reader does, but never reads past the last round (what follows is the
// next command). It polls with poll(2) before each read, as Open MPI's TCP
// path does, and yields every 64 polls so that both ends can share one
// processor.
func exchange(c net.Conn, n, iters int) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.New("exchange: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	msg, buf := make([]byte, n), make([]byte, 64<<10)
	var got, want int
	total := n * iters
	var rerr error
	// A peer that stopped answering: 10 s without a byte. The deadline
	// moves on at the polls' looks at the clock whenever bytes came in
	// since the last look, so the exchange's own reads read no clock.
	const quiet = 10 * time.Second
	stale, seen := time.Now().Add(quiet), 0
	read := func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for polls := 1; ; polls++ {
			k, err := unix.Poll(pfd, 0)
			if err == nil && k > 0 {
				break
			}
			if err != nil && err != unix.EINTR {
				rerr = err
				return true
			}
			if polls%64 == 0 {
				runtime.Gosched()
				switch now := time.Now(); {
				case got != seen:
					seen, stale = got, now.Add(quiet)
				case now.After(stale):
					rerr = fmt.Errorf("exchange: no answer for %v", quiet)
					return true
				}
			}
		}
		k, err := unix.Read(int(fd), buf[:min(len(buf), total-got)])
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
		case err != nil:
			rerr = err
		case k == 0:
			rerr = errors.New("exchange: the peer closed")
		default:
			got += k
		}
		return true
	}
	for range iters {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		for want += n; got < want; {
			if err := rc.Read(read); err != nil {
				return err
			}
			if rerr != nil {
				return fmt.Errorf("exchange: %w", rerr)
			}
		}
	}
	return nil
}
