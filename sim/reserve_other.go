//go:build !unix

package sim

// reserve returns n bytes that nothing will touch. Without mmap they are
// ordinary memory, which the operating system commits only if touched.
func reserve(n int) ([]byte, error) { return make([]byte, n), nil }

func release([]byte) {}
