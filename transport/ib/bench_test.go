package ib_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/goccl/goccl/transport/ib/ibfake"
)

// BenchmarkSendRecv measures one message from rank 0 to rank 1 over the
// fake fabric, receive posted first: the transport's own cost (slots,
// credits, rendezvous, the progress goroutine) plus the fake's copy, not
// a network's. Numbers for an HCA come from TestHardware* and goccl
// bench.
func BenchmarkSendRecv(b *testing.B) {
	for _, n := range []int{64, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			eps := connect(b, ibfake.New(), 2, nil)
			defer eps[0].Close()
			defer eps[1].Close()
			ctx := context.Background()
			out, in := make([]byte, n), make([]byte, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				r := eps[1].Irecv(0, 1, in)
				if err := eps[0].Isend(1, 1, out).Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if err := r.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
