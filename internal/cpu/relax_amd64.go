package cpu

// Relax tells the processor that the caller is spinning on a memory
// location (PAUSE): a core shared with another hardware thread gives that
// thread the cycles, and the loop does not flood the memory system with
// speculative loads that a store elsewhere will cancel.
//
//go:noescape
func Relax()
