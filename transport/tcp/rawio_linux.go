package tcp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Non-blocking system calls for the waiter's polls (spinReader) and the
// small message's inline write, made without entering the scheduler's
// syscall state (RawSyscall): they do not block, so the goroutine keeps
// its P and skips entersyscall and exitsyscall, a tenth of a poll's cost
// in user space. Go's RawConn.Read and Write still hold the descriptor
// (it cannot be closed and reused meanwhile).

// writevNB writes iov, a header and a payload, to the non-blocking
// socket fd, once: the small message's inline write, which returns as
// soon as the kernel has taken the bytes (or refused them, EAGAIN).
func writevNB(fd int, iov [][]byte) (int, error) {
	var vs [2]unix.Iovec
	if len(iov) > len(vs) {
		return unix.Writev(fd, iov)
	}
	k := 0
	for _, b := range iov {
		if len(b) > 0 {
			raceRead(b)
			vs[k].Base = unsafe.SliceData(b)
			vs[k].SetLen(len(b))
			k++
		}
	}
	for {
		n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&vs[0])), uintptr(k))
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return -1, e
	}
}

// readNB reads into b from the non-blocking socket fd.
func readNB(fd int, b []byte) (int, error) {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		switch e {
		case 0:
			raceWrote(b[:n])
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return -1, unix.EAGAIN
		}
		return -1, e
	}
}

// readable reports whether fd has bytes to read, has reached its end or
// failed (poll(2) with no timeout), and false when it cannot tell.
func readable(fd int, pfd *unix.PollFd, zero *unix.Timespec) bool {
	*pfd = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(pfd)), 1, uintptr(unsafe.Pointer(zero)), 0, 0, 0)
	return e != 0 || n != 0
}

// unsentBytes returns the bytes in socket fd's send queue (SIOCOUTQ), or
// -1.
func unsentBytes(fd int) int {
	n, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return -1
	}
	return n
}
