package ib_test

import (
	"context"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"sync"

	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
)

// Two ranks connect over the fake provider (a real job passes no Provider,
// building with -tags ibverbs) and exchange a small (eager) message and a
// large (rendezvous) one.
func ExampleConnect() {
	ctx := context.Background()
	fabric := ibfake.New()
	kv := testutil.NewKV() // a real job uses its store: store.WithPrefix(client, "goccl/<job>/")
	eps := make([]*ib.Endpoint, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			var err error
			eps[r], err = ib.Connect(ctx, ib.Config{Rank: r, Size: 2, JobID: "example", KV: kv,
				Provider: fabric.Provider(), Secret: []byte("secret")})
			if err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	defer eps[0].Close()
	defer eps[1].Close()

	small := make([]byte, 5)
	large := make([]byte, 1<<20)
	r1 := eps[1].Irecv(0, 1, small)
	r2 := eps[1].Irecv(0, 2, large)
	eps[0].Isend(1, 1, []byte("hello"))
	big := make([]byte, 1<<20)
	big[len(big)-1] = 42
	if err := eps[0].Isend(1, 2, big).Wait(ctx); err != nil {
		panic(err)
	}
	r1.Wait(ctx)
	r2.Wait(ctx)
	fmt.Println(string(small), large[len(large)-1])
	// Output: hello 42
}
