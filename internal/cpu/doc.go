// Package cpu holds what goccl needs from the processor and Go does not
// offer: Relax, the spin-loop hint, Prefetch and PrefetchW, the hints that
// bring a cache line in ahead of its use, and Online, the host's CPUs
// whatever share of them this process is bound to.
package cpu
