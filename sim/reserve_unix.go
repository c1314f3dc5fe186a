//go:build unix

package sim

import "golang.org/x/sys/unix"

// reserve returns n bytes of address space that faults on any access, so
// an algorithm that reached for the bytes of a SizeOnly buffer itself,
// instead of through its Peers, would crash at once rather than read
// garbage. It costs no memory.
func reserve(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
}

func release(b []byte) { _ = unix.Munmap(b) }
