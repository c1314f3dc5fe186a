package route_test

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/route"
)

// Four ranks on two hosts: 0 and 1 on one, 2 and 3 on the other. Each
// host's ranks share a local mesh (shm in a real job; transport/mem here)
// and every rank is on the network mesh (TCP in a real job). Rank 0 sends
// to its host peer over the local mesh and to rank 2 over the network.
func Example() {
	network := mem.New(4)
	hosts := [][]int{{0, 1}, {2, 3}}
	eps := make([]*route.Endpoint, 4)
	for _, ranks := range hosts {
		local := mem.New(len(ranks))
		for i, r := range ranks {
			ep, err := route.New(r, 4,
				route.Route{Name: "shm", Endpoint: local[i], Ranks: ranks},
				route.Route{Name: "tcp", Endpoint: network[r]})
			if err != nil {
				panic(err)
			}
			eps[r] = ep
			defer ep.Close()
		}
	}
	ctx := context.Background()
	for _, to := range []int{1, 2} {
		eps[0].Isend(to, transport.Tag(1), []byte("hi"))
		b := make([]byte, 2)
		if err := eps[to].Irecv(0, 1, b).Wait(ctx); err != nil {
			panic(err)
		}
		fmt.Printf("0 -> %d via %s: %s\n", to, eps[0].Via(to), b)
	}
	// Output:
	// 0 -> 1 via shm: hi
	// 0 -> 2 via tcp: hi
}
