//go:build linux

package shm_test

import (
	"context"
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

// benchSendRecv times one send from rank 0 to rank 1 and its receive,
// ranks being goroutines of this process with their own mappings. posted:
// the receive is posted before the send.
func benchSendRecv(b *testing.B, n int, posted bool, cfg shm.Config) {
	eps := connectAll(b, 2, cfg)
	b.Cleanup(func() { eps[0].Close(); eps[1].Close() })
	ctx := context.Background()
	src, dst := make([]byte, n), make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if posted {
			r := eps[1].Irecv(0, 1, dst)
			if err := eps[0].Isend(1, 1, src).Wait(ctx); err != nil {
				b.Fatal(err)
			}
			if err := r.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			transport.Release(r)
			continue
		}
		if err := eps[0].Isend(1, 1, src).Wait(ctx); err != nil {
			b.Fatal(err)
		}
		r := eps[1].Irecv(0, 1, dst)
		if err := r.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		transport.Release(r)
	}
}

func BenchmarkSendRecv8B(b *testing.B) {
	b.Run("posted", func(b *testing.B) { benchSendRecv(b, 8, true, shm.Config{}) })
	b.Run("unexpected", func(b *testing.B) { benchSendRecv(b, 8, false, shm.Config{}) })
}

func BenchmarkSendRecv1MiB(b *testing.B) {
	// cma: the receiver pulls the message (one copy); copy: through the
	// ring (two copies, pipelined).
	copyCfg := shm.Config{CMAThreshold: -1}
	b.Run("cma/posted", func(b *testing.B) { benchSendRecv(b, 1<<20, true, shm.Config{}) })
	b.Run("cma/unexpected", func(b *testing.B) { benchSendRecv(b, 1<<20, false, shm.Config{}) })
	b.Run("copy/posted", func(b *testing.B) { benchSendRecv(b, 1<<20, true, copyCfg) })
	b.Run("copy/unexpected", func(b *testing.B) { benchSendRecv(b, 1<<20, false, copyCfg) })
}
