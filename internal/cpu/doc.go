// Package cpu holds what a spin-wait needs from the processor and Go does
// not offer: Relax, the spin-loop hint.
package cpu
