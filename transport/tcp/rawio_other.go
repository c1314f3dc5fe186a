//go:build !linux

package tcp

import "golang.org/x/sys/unix"

// writevNB writes iov to the non-blocking socket fd, once.
func writevNB(fd int, iov [][]byte) (int, error) {
	for {
		n, err := unix.Writev(fd, iov)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// readNB reads into b from the non-blocking socket fd.
func readNB(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// readable reports whether fd has bytes to read, has reached its end or
// failed (poll(2) with no timeout), and false when it cannot tell.
func readable(fd int, pfd *unix.PollFd, _ *unix.Timespec) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err != nil || n != 0
}

// unsentBytes cannot tell the bytes in fd's send queue here: -1.
func unsentBytes(int) int { return -1 }
