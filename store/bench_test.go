package store

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkClient measures one Set and one Get round trip over loopback
// TCP per iteration; bytes/s counts the value once per round trip.
func BenchmarkClient(b *testing.B) {
	for _, size := range []int{8, 1 << 10, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			c, err := Host(context.Background(), "127.0.0.1:0", true, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			v := make([]byte, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := c.Set(ctx, "k", v); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Get(ctx, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAddParallel measures contended counter increments from many
// goroutines sharing one client.
func BenchmarkAddParallel(b *testing.B) {
	c, err := Host(context.Background(), "127.0.0.1:0", true, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.SetBytes(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Add(context.Background(), "n", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
