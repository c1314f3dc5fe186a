//go:build !amd64

package cpu

import "unsafe"

// PrefetchW does nothing where goccl has no prefetch hint for the
// processor.
func PrefetchW(p unsafe.Pointer) {}

// Prefetch does nothing where goccl has no prefetch hint for the
// processor.
func Prefetch(p unsafe.Pointer) {}
