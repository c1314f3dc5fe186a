// Package scratch pools the temporary buffers that reducing algorithms
// receive into, so that a collective does not allocate per call.
package scratch

import "sync"

var pool sync.Pool

// Get returns a buffer of length n. Its contents are arbitrary.
func Get(n int) *[]byte {
	if v, ok := pool.Get().(*[]byte); ok {
		if cap(*v) >= n {
			*v = (*v)[:n]
			return v
		}
		pool.Put(v)
	}
	b := make([]byte, n)
	return &b
}

// Put returns b to the pool. Call it only when no request can still write
// into b: after an error, drop the buffer instead.
func Put(b *[]byte) {
	if b != nil {
		pool.Put(b)
	}
}
