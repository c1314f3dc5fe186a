package store_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/goccl/goccl/store"
)

// Four ranks rendezvous: rank 0 hosts the store, every rank publishes its
// address and counts itself in, and rank 0 reads them all.
func ExampleHost() {
	ctx := context.Background()
	opts := store.Options{Secret: []byte("job-42")}
	root, err := store.Host(ctx, "127.0.0.1:0", true, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer root.Close() // stops the server too
	var wg sync.WaitGroup
	for rank := 1; rank < 4; rank++ {
		wg.Go(func() {
			c, err := store.Host(ctx, root.Addr(), false, opts)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer c.Close()
			c.Set(ctx, fmt.Sprintf("addr/%d", rank), fmt.Appendf(nil, "10.0.0.%d:4000", rank))
			c.Add(ctx, "arrived", 1)
		})
	}
	for rank := 1; rank < 4; rank++ {
		addr, err := root.Get(ctx, fmt.Sprintf("addr/%d", rank)) // waits for the rank
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("rank %d at %s\n", rank, addr)
	}
	wg.Wait()
	n, _ := root.Add(ctx, "arrived", 0)
	fmt.Println("arrived:", n)
	// Output:
	// rank 1 at 10.0.0.1:4000
	// rank 2 at 10.0.0.2:4000
	// rank 3 at 10.0.0.3:4000
	// arrived: 3
}

// A standalone server, as `goccl store` runs it, and a client.
func ExampleServe() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- store.Serve(ctx, ln, store.Options{}) }()

	c, err := store.Dial(ctx, ln.Addr().String(), store.Options{})
	if err != nil {
		stop()
		fmt.Println(err)
		return
	}
	v, _ := c.CompareSet(ctx, "leader", nil, []byte("rank 2"))
	fmt.Printf("%s\n", v)
	v, _ = c.CompareSet(ctx, "leader", nil, []byte("rank 5")) // too late
	fmt.Printf("%s\n", v)
	c.Close()
	stop()
	fmt.Println("serve:", <-done)
	// Output:
	// rank 2
	// rank 2
	// serve: <nil>
}

func ExampleWithPrefix() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "store")
	defer os.RemoveAll(dir)
	s, err := store.NewFileStore(filepath.Join(dir, "rendezvous"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	g1 := store.WithPrefix(s, "group1")
	g2 := store.WithPrefix(s, "group2")
	g1.Add(ctx, "barrier", 1)
	g1.Add(ctx, "barrier", 1)
	g2.Add(ctx, "barrier", 1)
	a, _ := g1.Get(ctx, "barrier")
	b, _ := s.Get(ctx, "group2/barrier")
	fmt.Printf("group1 %s, group2 %s\n", a, b)
	// Output: group1 2, group2 1
}

func ExampleNewFileStore() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "store")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rendezvous") // on a filesystem every rank sees

	// Two ranks open the same file.
	r0, _ := store.NewFileStore(path)
	r1, _ := store.NewFileStore(path)
	defer r0.Close()
	defer r1.Close()
	go r1.Set(ctx, "ready/1", []byte("yes"))
	if err := r0.Wait(ctx, "ready/1"); err != nil {
		fmt.Println(err)
		return
	}
	n, _ := r0.NumKeys(ctx)
	fmt.Println("keys:", n)
	// Output: keys: 1
}
