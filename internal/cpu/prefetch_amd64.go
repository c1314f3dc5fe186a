package cpu

import "unsafe"

// PrefetchW asks the processor to bring the cache line at p into this
// core's cache for writing (PREFETCHW): a store to it that follows finds
// the line already owned, instead of waiting for it to come from the core
// that read it last. It is a hint: it never faults and changes no memory.
//
//go:noescape
func PrefetchW(p unsafe.Pointer)

// Prefetch asks the processor to bring the cache line at p into this
// core's cache for reading (PREFETCHT0). It is a hint, like PrefetchW.
//
//go:noescape
func Prefetch(p unsafe.Pointer)
