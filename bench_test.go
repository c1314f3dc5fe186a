package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/testutil"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport/tcp"
)

// benchCollective times one collective on n in-process ranks over
// transport/mem; b.SetBytes counts the message size as nccl-tests does, so
// MB/s is algbw.
func benchCollective(b *testing.B, n int, a algo.Algorithm, size int, f func(ctx context.Context, c *goccl.Comm, buf, out []float32) error, opts ...goccl.Option) {
	comms := localComms(b, n, append(opts, goccl.WithAlgorithm(a))...)
	ctx := context.Background()
	count := size / 4
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, out := make([]float32, count), make([]float32, count*n)
			for i := 0; i < b.N; i++ {
				if err := f(ctx, c, buf, out); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

var benchSizes = []int{8, 64 << 10, 4 << 20}

func BenchmarkAllReduceMem(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, a := range algorithmsFor(algo.AllReduce) {
			for _, size := range benchSizes {
				b.Run(fmt.Sprintf("n=%d/%s/%dB", n, a, size), func(b *testing.B) {
					benchCollective(b, n, a, size, func(ctx context.Context, c *goccl.Comm, buf, _ []float32) error {
						return c.AllReduce(ctx, buf, reduceop.Sum)
					})
				})
			}
		}
	}
}

func BenchmarkAllGatherMem(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, a := range algorithmsFor(algo.AllGather) {
			for _, size := range benchSizes {
				b.Run(fmt.Sprintf("n=%d/%s/%dB", n, a, size), func(b *testing.B) {
					benchCollective(b, n, a, size, func(ctx context.Context, c *goccl.Comm, buf, out []float32) error {
						return c.AllGather(ctx, buf[:len(buf)/n], out[:len(buf)/n*n])
					})
				})
			}
		}
	}
}

func BenchmarkBroadcastMem(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, a := range algorithmsFor(algo.Broadcast) {
			for _, size := range benchSizes {
				b.Run(fmt.Sprintf("n=%d/%s/%dB", n, a, size), func(b *testing.B) {
					benchCollective(b, n, a, size, func(ctx context.Context, c *goccl.Comm, buf, _ []float32) error {
						return c.Broadcast(ctx, buf, 0)
					})
				})
			}
		}
	}
}

// BenchmarkCommsLogOff shows that a disabled comms logger costs nothing
// measurable: compare with BenchmarkCommsLogOn.
func BenchmarkCommsLogOff(b *testing.B) {
	benchCollective(b, 2, "", 8, func(ctx context.Context, c *goccl.Comm, buf, _ []float32) error {
		return c.AllReduce(ctx, buf, reduceop.Sum)
	})
}

func BenchmarkCommsLogOn(b *testing.B) {
	benchCollective(b, 2, "", 8, func(ctx context.Context, c *goccl.Comm, buf, _ []float32) error {
		return c.AllReduce(ctx, buf, reduceop.Sum)
	}, goccl.WithCommsLog(commslog.Config{Enabled: true}))
}

// BenchmarkMismatchCheck measures the collective fingerprint's cost on the
// latency-bound path: an 8-byte allreduce on 2 ranks, with and without it.
func BenchmarkMismatchCheck(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("check=%v", on), func(b *testing.B) {
			benchCollective(b, 2, algo.Doubling, 8, func(ctx context.Context, c *goccl.Comm, buf, _ []float32) error {
				return c.AllReduce(ctx, buf, reduceop.Sum)
			}, goccl.WithMismatchCheck(on))
		})
	}
}

// BenchmarkAllReduce8B is issue 15's latency-bound call: an 8-byte
// allreduce on 2 goroutine ranks with the cost model's choice, on the
// shared board and with the board off (over messages).
func BenchmarkAllReduce8B(b *testing.B) {
	for _, board := range []string{"on", "off"} {
		b.Run("board="+board, func(b *testing.B) {
			b.Setenv(goccl.EnvBoard, board)
			benchCollective(b, 2, "", 8, func(ctx context.Context, c *goccl.Comm, buf, _ []float32) error {
				return c.AllReduce(ctx, buf, reduceop.Sum)
			})
		})
	}
}

// BenchmarkAllReduce8BTCP is BenchmarkAllReduce8B's call over
// transport/tcp loopback, both ranks in this process: the message path's
// allocations and per-call cost as a process rank pays them (goccl bench
// -transport tcp times the same call between processes).
func BenchmarkAllReduce8BTCP(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := testutil.NewKV()
	comms := make([]*goccl.Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			ep, err := tcp.Connect(ctx, tcp.Config{Rank: r, Size: 2, JobID: "bench", KV: kv,
				ListenHost: "127.0.0.1", Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				errs[r] = err
				return
			}
			if comms[r], errs[r] = goccl.New(ep); errs[r] != nil {
				ep.Close()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(8)
	b.ResetTimer()
	for r, c := range comms {
		wg.Go(func() {
			buf := make([]float32, 2)
			for range b.N {
				if err := c.AllReduce(ctx, buf, reduceop.Sum); err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	for _, c := range comms {
		c.Close()
	}
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCoalesced puts AllReduceCoalesced of 16 separate slices of
// 1 MiB beside AllReduce of one 16 MiB slice, on goroutine ranks: the
// coalesced call runs on the slices where they lie (coalesced.go), so the
// two should take about the same time. BENCHMARKS.md has the figures, and
// goccl bench -parts 16 the same over processes.
func BenchmarkCoalesced(b *testing.B) {
	const parts, part = 16, 1 << 20
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("n=%d/allreduce-16MiB", n), func(b *testing.B) {
			benchCollective(b, n, "", parts*part, func(ctx context.Context, c *goccl.Comm, buf, _ []float32) error {
				return c.AllReduce(ctx, buf, reduceop.Sum)
			})
		})
		b.Run(fmt.Sprintf("n=%d/coalesced-16x1MiB", n), func(b *testing.B) {
			lists := make([][]any, n) // each rank's own slices
			for r := range lists {
				lists[r] = make([]any, parts)
				for i := range lists[r] {
					lists[r][i] = make([]float32, part/4)
				}
			}
			benchCollective(b, n, "", parts*part, func(ctx context.Context, c *goccl.Comm, _, _ []float32) error {
				return c.AllReduceCoalesced(ctx, lists[c.Rank()], reduceop.Sum)
			})
		})
	}
}
