package goccl

import (
	"math/bits"
	"sync"
)

// Scratch buffers are pooled by power-of-two size class so that a steady
// training loop allocates nothing per collective.
var scratchPools [48]sync.Pool

func getScratch(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	class := bits.Len(uint(n - 1))
	if p, ok := scratchPools[class].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<class)
}

func putScratch(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 {
		return
	}
	b = b[:c]
	scratchPools[bits.Len(uint(c-1))].Put(&b)
}
