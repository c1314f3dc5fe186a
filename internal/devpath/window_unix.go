//go:build unix

package devpath

import "golang.org/x/sys/unix"

// reserve returns n bytes of address space that no one may touch: any read
// or write faults. A device buffer is shown to an algorithm as such a range
// (peers.go), so an algorithm that reached for the bytes itself instead
// of asking its Peers would crash at once, in tests, rather than read
// garbage.
func reserve(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
}

// release gives back a range from reserve.
func release(w []byte) { unix.Munmap(w) }
