// Package scratch pools the temporary buffers that collectives receive
// into and stage through, by power-of-two size class, so that a steady
// training loop allocates nothing per call whatever its message sizes.
// The algorithms (algo/...) and the communicator share it.
package scratch

import (
	"math/bits"
	"sync"
)

var pools [48]sync.Pool

// headers recycles the *[]byte boxes the pools hold, so that Put does not
// allocate one per call (a slice header does not fit in an interface).
var headers = sync.Pool{New: func() any { return new([]byte) }}

// Get returns a buffer of length n. Its contents are arbitrary.
func Get(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	class := bits.Len(uint(n - 1))
	if p, ok := pools[class].Get().(*[]byte); ok {
		b := (*p)[:n]
		*p = nil
		headers.Put(p)
		return b
	}
	return make([]byte, n, 1<<class)
}

// Put returns b, from Get, to its pool. Call it only when nothing can still
// write into b: after an error, drop the buffer instead.
func Put(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 {
		return // not from Get
	}
	p := headers.Get().(*[]byte)
	*p = b[:c]
	pools[bits.Len(uint(c-1))].Put(p)
}
