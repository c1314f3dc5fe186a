package onebit

import (
	"math/rand/v2"
	"testing"
)

const benchN = 64 << 20 / 4 // 64 MiB of float32

func benchData(n int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// BenchmarkCopy64MiB is the yardstick for the packing benchmarks: Go's copy
// of 64 MiB, counted as 64 MiB per operation.
func BenchmarkCopy64MiB(b *testing.B) {
	src := benchData(benchN)
	dst := make([]float32, benchN)
	copy(dst, src) // fault the pages in before timing
	b.SetBytes(4 * benchN)
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkPack64MiB packs the signs of 64 MiB of float32 (bytes counted on
// the float32 side, like the copy).
func BenchmarkPack64MiB(b *testing.B) {
	src := benchData(benchN)
	dst := make([]uint8, PackedLen(benchN))
	b.SetBytes(4 * benchN)
	for b.Loop() {
		Pack(dst, src)
	}
}

func BenchmarkUnpack64MiB(b *testing.B) {
	src := make([]uint8, PackedLen(benchN))
	for i := range src {
		src[i] = uint8(i * 37)
	}
	dst := make([]float32, benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		Unpack(dst, src)
	}
}

func BenchmarkCompensateNorm64MiB(b *testing.B) {
	x := benchData(benchN)
	e := make([]float32, benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		HostKernel{}.CompensateNorm(e, x)
	}
}

func BenchmarkPackUpdate64MiB(b *testing.B) {
	e := benchData(benchN)
	bits := make([]uint8, PackedLen(benchN))
	b.SetBytes(4 * benchN)
	for b.Loop() {
		HostKernel{}.PackUpdate(bits, e, 0.5)
	}
}

func BenchmarkAccumulateSigns64MiB(b *testing.B) {
	bits := make([]uint8, PackedLen(benchN))
	for i := range bits {
		bits[i] = uint8(i * 37)
	}
	dst := make([]float32, benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		HostKernel{}.AccumulateSigns(dst, bits, 0.25)
	}
}

// BenchmarkCompressedAllReduce64MiB runs the whole collective on one rank
// (the communication is then local copies): the compute of both sides.
func BenchmarkCompressedAllReduce64MiB(b *testing.B) {
	buf := benchData(benchN)
	st, err := NewState(benchN, 1)
	if err != nil {
		b.Fatal(err)
	}
	c := newFakeWorld(1).comm(0)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		if err := CompressedAllReduce(b.Context(), c, buf, st); err != nil {
			b.Fatal(err)
		}
	}
}
