package tcp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Non-blocking system calls for the waiter's polls (spinReader), made
// without entering the scheduler's syscall state (RawSyscall): they do
// not block, so the goroutine keeps its P and skips entersyscall and
// exitsyscall, a tenth of a poll's cost in user space. Go's RawConn.Read
// still holds the descriptor (it cannot be closed and reused meanwhile).

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
