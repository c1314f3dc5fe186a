// Package cpu holds what goccl's hot paths need from the processor and Go
// does not offer: Relax, the spin-loop hint, and Prefetch and PrefetchW,
// the hints that bring a cache line in ahead of its use.
package cpu
