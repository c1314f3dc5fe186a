//go:build !amd64

package cpu

// Relax does nothing where goccl has no spin-loop hint for the processor.
func Relax() {}
