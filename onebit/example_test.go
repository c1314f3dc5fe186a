package onebit

import (
	"context"
	"fmt"
)

// Four ranks average a vector with the 1-bit compressed allreduce. The
// in-process fake Comm of the tests stands in for a *goccl.Comm. Every rank
// gets the same result: each element is ± the scale of the chunk it falls in,
// and the compression error is kept in the State for the next step.
func ExampleCompressedAllReduce() {
	const p = 4
	world := newFakeWorld(p)
	out := make([][]float32, p)
	_ = world.run(func(c *fakeComm) error {
		st, err := NewState(6, c.Size()) // once per tensor, reused every step
		if err != nil {
			return err
		}
		r := float32(c.Rank())
		buf := []float32{1 + r, -1 - r, 2, -2, 0, 3}
		for range 2 {
			if err := CompressedAllReduce(context.Background(), c, buf, st); err != nil {
				return err
			}
		}
		out[c.Rank()] = buf
		return nil
	})
	fmt.Printf("%.4f\n", out[0])
	fmt.Println(out[0][0] == out[3][0])
	// Output:
	// [1.2419 -1.2419 1.2419 -1.2419 -1.2419 1.2419]
	// true
}

// The bytes one rank sends for a 1M-element float32 tensor over 8 ranks.
func ExampleWireBytes() {
	n, p := 1<<20, 8
	fmt.Println(WireBytes(n, p), RingAllReduceBytes(n, p))
	// Output: 229432 7340032
}

// Signs are packed most significant bit first; zero and negative zero
// count as positive.
func ExamplePack() {
	negZero := float32(0)
	negZero = -negZero
	bits := make([]uint8, PackedLen(10))
	Pack(bits, []float32{1, -1, 0, negZero, -0.5, 2, -3, 4, -5, 6})
	fmt.Printf("%08b\n", bits)
	// Output: [10110101 01000000]
}

// After a step, each rank can read what was compressed: its own worker
// scale and signs, every rank's worker scale, and the server scales and
// signs of every chunk, which are the whole of the output. Two ranks, four
// elements padded to 16: chunk 0 (elements 0-7) belongs to rank 0, chunk 1
// (all padding) to rank 1. Padding counts as positive, and pulls the scale
// of chunk 0 down to sqrt(6.5/8).
func ExampleState_ServerScales() {
	world := newFakeWorld(2)
	states := make([]*State, 2)
	out := make([][]float32, 2)
	_ = world.run(func(c *fakeComm) error {
		st, err := NewState(4, c.Size())
		if err != nil {
			return err
		}
		states[c.Rank()] = st
		_, ok := st.WorkerScale()
		fmt.Println("before the first step:", ok) // printed twice, once per rank
		buf := [][]float32{{1, -1, 1, -1}, {3, 3, -3, -3}}[c.Rank()]
		out[c.Rank()] = buf
		return CompressedAllReduce(context.Background(), c, buf, st)
	})
	st := states[0]
	ws, _ := st.WorkerScale()
	fmt.Printf("rank 0 worker scale %.4f, signs %08b\n", ws, st.WorkerSigns())
	fmt.Printf("worker scales %.4f\n", st.WorkerScales())
	fmt.Printf("server scales %.4f, signs %08b\n", st.ServerScales(), st.ServerSigns())
	fmt.Printf("output %.4f\n", out[0])
	// Output:
	// before the first step: false
	// before the first step: false
	// rank 0 worker scale 0.5000, signs [10101111 11111111]
	// worker scales [0.5000 1.5000]
	// server scales [0.9014 1.0000], signs [11001111 11111111]
	// output [0.9014 0.9014 -0.9014 -0.9014]
}
