package tcp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

func benchMesh(b *testing.B, streams int) []transport.Endpoint {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eps, err := connectAll(ctx, 2, tcp.Config{Streams: streams})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		eps[0].Close()
		eps[1].Close()
	})
	return eps
}

// BenchmarkThroughput sends 64 MiB messages from rank 0 to rank 1 over
// loopback, the receive posted before each send.
func BenchmarkThroughput(b *testing.B) {
	for _, streams := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			const n = 64 << 20
			eps := benchMesh(b, streams)
			ctx := context.Background()
			src, dst := make([]byte, n), make([]byte, n)
			b.SetBytes(n)
			for b.Loop() {
				r := eps[1].Irecv(0, 1, dst)
				s := eps[0].Isend(1, 1, src)
				if err := s.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if err := r.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPingPong measures a 1-byte round trip; ns/op is one round trip.
func BenchmarkPingPong(b *testing.B) {
	eps := benchMesh(b, 1)
	ctx := context.Background()
	ping, pong := []byte{1}, make([]byte, 1)
	done := make(chan error, 1)
	stop := make(chan struct{})
	go func() { // rank 1 echoes
		buf := make([]byte, 1)
		for {
			if err := eps[1].Irecv(0, 1, buf).Wait(ctx); err != nil {
				select {
				case <-stop:
					done <- nil
				default:
					done <- err
				}
				return
			}
			if err := eps[1].Isend(0, 2, buf).Wait(ctx); err != nil {
				done <- err
				return
			}
		}
	}()
	b.SetBytes(1)
	for b.Loop() {
		r := eps[0].Irecv(1, 2, pong)
		if err := eps[0].Isend(1, 1, ping).Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	close(stop)
	eps[1].Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
