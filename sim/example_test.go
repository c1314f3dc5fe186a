package sim_test

import (
	"context"
	"fmt"
	"os"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/sim"
)

// Four ranks on two hosts allreduce 64 bytes with the ring; the
// transcript shows who sends what to whom, step by step.
func Example() {
	cfg := sim.Config{Ranks: 4, ElemSize: 8, Topology: sim.DefaultTopology(2), Gamma: sim.DefaultGamma, Record: true}
	res, err := sim.RunCollective(context.Background(), cfg, algo.AllReduce, algo.Ring, 64)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%.3f us, %d messages\n", res.Time*1e6, res.Msgs)
	var first []sim.Event
	for _, e := range res.Events {
		if e.Kind == sim.Send && e.Step == 1 {
			first = append(first, e)
		}
	}
	if err := sim.Transcript(os.Stdout, first, false); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 18.004 us, 24 messages
	// step 1: rank 0 -> rank 1: 16 bytes
	// step 1: rank 1 -> rank 2: 16 bytes
	// step 1: rank 2 -> rank 3: 16 bytes
	// step 1: rank 3 -> rank 0: 16 bytes
}

// The cost of a 64 MiB allreduce on 64 ranks, 8 to a host, without
// moving any data: the ring reaches its links' bandwidth; halving's
// distant partners make the 8 ranks of a host share its NIC.
func ExampleRunCollective_sizeOnly() {
	cfg := sim.Config{Ranks: 64, Topology: sim.DefaultTopology(8), Gamma: sim.DefaultGamma, SizeOnly: true}
	for _, a := range []algo.Algorithm{algo.Ring, algo.Halving} {
		res, err := sim.RunCollective(context.Background(), cfg, algo.AllReduce, a, 64<<20)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %.1f ms\n", a, res.Time*1e3)
	}
	// Output:
	// ring: 10.6 ms
	// halving: 75.4 ms
}
