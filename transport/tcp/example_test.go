package tcp_test

import (
	"context"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"sync"
	"time"

	"github.com/goccl/goccl/transport/tcp"
)

// Example connects two ranks over loopback (here goroutines of one process
// sharing an in-memory KV; normally processes sharing the store package's
// server) and sends a message from rank 0 to rank 1.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := testutil.NewKV()
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			ep, err := tcp.Connect(ctx, tcp.Config{Rank: rank, Size: 2, JobID: "example",
				KV: kv, ListenHost: "127.0.0.1", Secret: []byte("shared secret")})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer ep.Close()
			if rank == 0 {
				err = ep.Isend(1, 0, []byte("hello")).Wait(ctx)
			} else {
				buf := make([]byte, 5)
				if err = ep.Irecv(0, 0, buf).Wait(ctx); err == nil {
					fmt.Printf("rank 1 got %q\n", buf)
				}
			}
			if err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	// Output: rank 1 got "hello"
}
