//go:build unix

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an flock(2) lock on f: shared for readers, exclusive for
// writers. Linux's NFS client maps flock to POSIX byte-range locks, so the
// lock also holds across the machines of a shared filesystem, and taking
// it revalidates the client's cache of the file.
func lockFile(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

func unlockFile(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
