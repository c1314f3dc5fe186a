package ckpt_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ckpt"
)

const benchState = 4 << 20 // bytes of state per rank

// benchRanks runs f on every rank of an in-process world b.N times; the
// timer covers only the loop.
func benchRanks(b *testing.B, n int, setup func(ctx context.Context, c *goccl.Comm) (func(ctx context.Context) error, error)) {
	comms, err := goccl.NewLocal(n)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx := context.Background()
	steps := make([]func(context.Context) error, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); steps[r], errs[r] = setup(ctx, c) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(benchState) // per rank; ranks save at once
	b.ResetTimer()
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				if err := steps[r](ctx); err != nil {
					errs[r] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchStateBytes(r int) []byte {
	st := make([]byte, benchState)
	for i := range st {
		st[i] = byte(i*7 + r)
	}
	return st
}

// BenchmarkSave saves 4 MiB per rank, erasure coded, and reports the bytes
// each rank holds for others per byte of its own state (held/state) next
// to what replication that survives the same m losses holds (m+1 copies of
// the checkpoint: replica/state).
func BenchmarkSave(b *testing.B) {
	for _, tc := range []struct{ n, k, m int }{{6, 3, 2}, {6, 4, 1}, {9, 4, 2}, {9, 6, 2}} {
		b.Run(fmt.Sprintf("n%d_k%d_m%d", tc.n, tc.k, tc.m), func(b *testing.B) {
			var held int
			benchRanks(b, tc.n, func(ctx context.Context, c *goccl.Comm) (func(context.Context) error, error) {
				s, err := ckpt.New(c, ckpt.Config{DataShards: tc.k, ParityShards: tc.m})
				if err != nil {
					return nil, err
				}
				st := benchStateBytes(c.Rank())
				return func(ctx context.Context) error {
					if err := s.Save(ctx, st); err != nil {
						return err
					}
					if c.Rank() == 0 {
						held = s.HeldBytes()
					}
					return nil
				}, nil
			})
			b.ReportMetric(float64(held)/benchState, "held/state")
			b.ReportMetric(float64(tc.m+1), "replica/state")
		})
	}
}

// BenchmarkReplicate is the baseline: every rank sends m full copies of its
// state to the next m ranks (and would keep one itself), with the same
// AllToAllSplit.
func BenchmarkReplicate(b *testing.B) {
	for _, tc := range []struct{ n, m int }{{6, 2}, {6, 1}, {9, 2}} {
		b.Run(fmt.Sprintf("n%d_m%d", tc.n, tc.m), func(b *testing.B) {
			benchRanks(b, tc.n, func(ctx context.Context, c *goccl.Comm) (func(context.Context) error, error) {
				n, r := tc.n, c.Rank()
				st := benchStateBytes(r)
				sc, rc := make([]int, n), make([]int, n)
				for j := 1; j <= tc.m; j++ {
					sc[(r+j)%n], rc[(r-j+n)%n] = benchState, benchState
				}
				return func(ctx context.Context) error {
					own := append([]byte(nil), st...) // the owner's snapshot copy
					send := make([]byte, 0, tc.m*benchState)
					for range tc.m {
						send = append(send, own...)
					}
					recv := make([]byte, tc.m*benchState)
					return c.AllToAllSplit(ctx, send, sc, recv, rc)
				}, nil
			})
		})
	}
}

// BenchmarkRestore restores 4 MiB per rank after losing m ranks, including
// the save that re-protects the checkpoint.
func BenchmarkRestore(b *testing.B) {
	const n = 6
	cfg := ckpt.Config{DataShards: 3, ParityShards: 2}
	benchRanks(b, n, func(ctx context.Context, c *goccl.Comm) (func(context.Context) error, error) {
		s, err := ckpt.New(c, cfg)
		if err != nil {
			return nil, err
		}
		if err := s.Save(ctx, benchStateBytes(c.Rank())); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			if c.Rank() == 1 || c.Rank() == 4 {
				if s, err = ckpt.New(c, cfg); err != nil {
					return err
				}
			}
			_, err := s.Restore(ctx)
			return err
		}, nil
	})
}
