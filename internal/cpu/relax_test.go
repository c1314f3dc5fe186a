package cpu_test

import (
	"testing"

	"github.com/goccl/goccl/internal/cpu"
)

func TestRelaxReturns(t *testing.T) {
	for range 1000 {
		cpu.Relax()
	}
}

// BenchmarkRelax is the hint's own time: how long a poll that relaxes
// between reads takes per read.
func BenchmarkRelax(b *testing.B) {
	for b.Loop() {
		cpu.Relax()
	}
}
