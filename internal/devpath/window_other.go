//go:build !unix

package devpath

// reserve returns n bytes standing for a device buffer in the algorithms
// (peers.go). Without mmap it is ordinary memory the algorithms never
// touch.
func reserve(n int) ([]byte, error) { return make([]byte, n), nil }

// release gives back a range from reserve.
func release([]byte) {}
