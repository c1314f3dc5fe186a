package algotest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/goccl/goccl/algo"
)

// WorldSizes are the group sizes the conformance tests run: powers of two
// and not.
var WorldSizes = []int{1, 2, 3, 4, 5, 6, 7, 8, 9}

// Counts returns the element counts the conformance tests use for group
// size n: 0, 1, small primes, a power of two, counts not divisible by n,
// and n-1 (fewer elements than ranks).
func Counts(n int) []int {
	c := []int{0, 1, 2, 3, 5, 7, 8, 13, 31, 64, 1000, 4099}
	if n > 1 && !slices.Contains(c, n-1) {
		c = append(c, n-1)
	}
	return c
}

// BlockPatterns returns the ways the tests split total elements into n
// blocks: even, ragged (some blocks empty), and everything on one rank.
func BlockPatterns(total, n int) map[string][]int {
	ragged := make([]int, n)
	sum := 0
	for i := range ragged {
		sum += (i*5 + 3) % 7
	}
	left := total
	for i := range ragged {
		ragged[i] = total * ((i*5 + 3) % 7) / sum
		left -= ragged[i]
	}
	ragged[0] += left
	one := make([]int, n)
	one[total%n] = total
	return map[string][]int{"even": algo.EvenCounts(total, n), "ragged": ragged, "one": one}
}

// int64Input is rank r's deterministic input of count int64s.
func int64Input(r, count int, salt int) []int64 {
	v := make([]int64, count)
	rng := rand.New(rand.NewPCG(uint64(r), uint64(salt)))
	for i := range v {
		v[i] = rng.Int64N(2001) - 1000
	}
	return v
}

func float64Input(r, count int, salt int) []float64 {
	v := make([]float64, count)
	rng := rand.New(rand.NewPCG(uint64(r), uint64(salt)+1<<32))
	for i := range v {
		v[i] = rng.Float64()*2 - 1
	}
	return v
}

// guardedRun gives each rank a guarded copy of in[r], runs fn on its
// guarded buffer, checks the guards and returns the buffers.
func guardedRun(n int, reduce ReduceFunc, in [][]byte, fn func(ctx context.Context, p algo.Peers, buf []byte) error) ([][]byte, error) {
	g := make([]*Guarded, n)
	for r := range g {
		g[r] = NewGuarded(in[r])
	}
	err := Run(n, 8, reduce, func(ctx context.Context, p algo.Peers) error {
		return fn(ctx, p, g[p.Rank()].Buf())
	})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for r := range g {
		if err := g[r].Check(); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		out[r] = g[r].Buf()
	}
	return out, nil
}

// TestAllReduce checks fn against a sequential sum for int64 (exact) and
// float64 (within rounding, and bit-identical on every rank) on every world
// size and count, with guard bands around every buffer.
func TestAllReduce(t *testing.T, fn algo.AllReduceFunc) {
	t.Helper()
	for _, n := range WorldSizes {
		for _, count := range Counts(n) {
			// int64: exact.
			in := make([][]byte, n)
			want := make([]int64, count)
			for r := range in {
				v := int64Input(r, count, count)
				for i, x := range v {
					want[i] += x
				}
				in[r] = Int64Bytes(v)
			}
			out, err := guardedRun(n, SumInt64, in, func(ctx context.Context, p algo.Peers, buf []byte) error { return fn(ctx, p, buf) })
			if err != nil {
				t.Fatalf("int64 n=%d count=%d: %v", n, count, err)
			}
			for r := range out {
				if got := Int64s(out[r]); !slices.Equal(got, want) {
					t.Fatalf("int64 n=%d count=%d rank %d: got %v, want %v", n, count, r, head(got), head(want))
				}
			}
			// float64: close to the sequential sum, identical everywhere.
			wantF := make([]float64, count)
			for r := range in {
				v := float64Input(r, count, count)
				for i, x := range v {
					wantF[i] += x
				}
				in[r] = Float64Bytes(v)
			}
			out, err = guardedRun(n, SumFloat64, in, func(ctx context.Context, p algo.Peers, buf []byte) error { return fn(ctx, p, buf) })
			if err != nil {
				t.Fatalf("float64 n=%d count=%d: %v", n, count, err)
			}
			for r := range out {
				if !bytes.Equal(out[r], out[0]) {
					t.Fatalf("float64 n=%d count=%d: rank %d differs from rank 0 in its bits", n, count, r)
				}
			}
			for i, x := range Float64s(out[0]) {
				if math.Abs(x-wantF[i]) > 1e-12 {
					t.Fatalf("float64 n=%d count=%d: element %d = %v, want %v", n, count, i, x, wantF[i])
				}
			}
		}
	}
}

// TestReduceScatter checks that rank r ends with block r of the int64 sum,
// for even, ragged and one-rank block layouts.
func TestReduceScatter(t *testing.T, fn algo.ReduceScatterFunc) {
	t.Helper()
	for _, n := range WorldSizes {
		for _, total := range Counts(n) {
			for name, counts := range BlockPatterns(total, n) {
				in := make([][]byte, n)
				want := make([]int64, total)
				for r := range in {
					v := int64Input(r, total, total)
					for i, x := range v {
						want[i] += x
					}
					in[r] = Int64Bytes(v)
				}
				out, err := guardedRun(n, SumInt64, in, func(ctx context.Context, p algo.Peers, buf []byte) error {
					return fn(ctx, p, buf, counts)
				})
				if err != nil {
					t.Fatalf("n=%d counts=%v (%s): %v", n, counts, name, err)
				}
				off := algo.Offsets(counts, 1)
				for r := range out {
					got := Int64s(out[r])[off[r]:off[r+1]]
					if w := want[off[r]:off[r+1]]; !slices.Equal(got, w) {
						t.Fatalf("n=%d counts=%v (%s) rank %d: got %v, want %v", n, counts, name, r, head(got), head(w))
					}
				}
			}
		}
	}
}

// blockInputs gives rank r its own block (distinct values) in place and a
// filler of -7 elsewhere; it returns the buffers and the gathered result.
func blockInputs(n int, counts []int) ([][]byte, []int64) {
	off := algo.Offsets(counts, 1)
	all := make([]int64, off[n])
	in := make([][]byte, n)
	for r := range in {
		v := make([]int64, off[n])
		for i := range v {
			v[i] = -7
		}
		for i := off[r]; i < off[r+1]; i++ {
			v[i] = int64(1000*r + i + 1)
			all[i] = v[i]
		}
		in[r] = Int64Bytes(v)
	}
	return in, all
}

// TestAllGather checks that every rank ends with every block, for even,
// ragged and one-rank block layouts.
func TestAllGather(t *testing.T, fn algo.AllGatherFunc) {
	t.Helper()
	for _, n := range WorldSizes {
		for _, total := range Counts(n) {
			for name, counts := range BlockPatterns(total, n) {
				in, want := blockInputs(n, counts)
				out, err := guardedRun(n, nil, in, func(ctx context.Context, p algo.Peers, buf []byte) error {
					return fn(ctx, p, buf, counts)
				})
				if err != nil {
					t.Fatalf("n=%d counts=%v (%s): %v", n, counts, name, err)
				}
				for r := range out {
					if got := Int64s(out[r]); !slices.Equal(got, want) {
						t.Fatalf("n=%d counts=%v (%s) rank %d: got %v, want %v", n, counts, name, r, head(got), head(want))
					}
				}
			}
		}
	}
}

// TestBroadcast checks that every rank ends with the root's buffer, for
// every root.
func TestBroadcast(t *testing.T, fn algo.BroadcastFunc) {
	t.Helper()
	for _, n := range WorldSizes {
		for _, count := range Counts(n) {
			for root := 0; root < n; root++ {
				in := make([][]byte, n)
				for r := range in {
					in[r] = Int64Bytes(int64Input(r, count, root))
				}
				out, err := guardedRun(n, nil, in, func(ctx context.Context, p algo.Peers, buf []byte) error {
					return fn(ctx, p, buf, root)
				})
				if err != nil {
					t.Fatalf("n=%d count=%d root=%d: %v", n, count, root, err)
				}
				for r := range out {
					if !bytes.Equal(out[r], in[root]) {
						t.Fatalf("n=%d count=%d root=%d: rank %d differs from the root", n, count, root, r)
					}
				}
			}
		}
	}
}

// TestReduce checks that the root ends with the int64 sum, for every root.
func TestReduce(t *testing.T, fn algo.ReduceFunc) {
	t.Helper()
	for _, n := range WorldSizes {
		for _, count := range Counts(n) {
			for root := 0; root < n; root++ {
				in := make([][]byte, n)
				want := make([]int64, count)
				for r := range in {
					v := int64Input(r, count, root)
					for i, x := range v {
						want[i] += x
					}
					in[r] = Int64Bytes(v)
				}
				out, err := guardedRun(n, SumInt64, in, func(ctx context.Context, p algo.Peers, buf []byte) error {
					return fn(ctx, p, buf, root)
				})
				if err != nil {
					t.Fatalf("n=%d count=%d root=%d: %v", n, count, root, err)
				}
				if got := Int64s(out[root]); !slices.Equal(got, want) {
					t.Fatalf("n=%d count=%d root=%d: got %v, want %v", n, count, root, head(got), head(want))
				}
			}
		}
	}
}

// TestGather checks that the root ends with every rank's block, for every
// root and for even, ragged and one-rank block layouts.
func TestGather(t *testing.T, fn algo.GatherFunc) {
	t.Helper()
	for _, n := range WorldSizes {
		for _, total := range Counts(n) {
			for name, counts := range BlockPatterns(total, n) {
				for root := 0; root < n; root++ {
					in, want := blockInputs(n, counts)
					out, err := guardedRun(n, nil, in, func(ctx context.Context, p algo.Peers, buf []byte) error {
						return fn(ctx, p, buf, counts, root)
					})
					if err != nil {
						t.Fatalf("n=%d counts=%v (%s) root=%d: %v", n, counts, name, root, err)
					}
					if got := Int64s(out[root]); !slices.Equal(got, want) {
						t.Fatalf("n=%d counts=%v (%s) root=%d: got %v, want %v", n, counts, name, root, head(got), head(want))
					}
				}
			}
		}
	}
}

// TestScatter checks that rank i ends with block i of the root's buffer, for
// every root and for even, ragged and one-rank block layouts.
func TestScatter(t *testing.T, fn algo.ScatterFunc) {
	t.Helper()
	for _, n := range WorldSizes {
		for _, total := range Counts(n) {
			for name, counts := range BlockPatterns(total, n) {
				off := algo.Offsets(counts, 1)
				for root := 0; root < n; root++ {
					in := make([][]byte, n)
					for r := range in {
						in[r] = Int64Bytes(int64Input(r, total, root))
					}
					out, err := guardedRun(n, nil, in, func(ctx context.Context, p algo.Peers, buf []byte) error {
						return fn(ctx, p, buf, counts, root)
					})
					if err != nil {
						t.Fatalf("n=%d counts=%v (%s) root=%d: %v", n, counts, name, root, err)
					}
					src := Int64s(in[root])
					for r := range out {
						got, w := Int64s(out[r])[off[r]:off[r+1]], src[off[r]:off[r+1]]
						if !slices.Equal(got, w) {
							t.Fatalf("n=%d counts=%v (%s) root=%d rank %d: got %v, want %v", n, counts, name, root, r, head(got), head(w))
						}
					}
				}
			}
		}
	}
}

// AllToAllCounts returns send-count matrices for the all-to-all tests:
// m[i][j] elements go from rank i to rank j.
func AllToAllCounts(c, n int) map[string][][]int {
	uni, rag := make([][]int, n), make([][]int, n)
	for i := range n {
		uni[i], rag[i] = make([]int, n), make([]int, n)
		for j := range n {
			uni[i][j] = c
			rag[i][j] = (c*(i+1) + 7*j) % (c + 1)
		}
	}
	return map[string][][]int{"uniform": uni, "ragged": rag}
}

// TestAllToAll checks every block of every rank's receive buffer, with
// guard bands, for uniform and ragged count matrices.
func TestAllToAll(t *testing.T, fn algo.AllToAllFunc) {
	t.Helper()
	val := func(i, j, k int) int64 { return int64(i*1_000_000 + j*10_000 + k) }
	for _, n := range WorldSizes {
		for _, c := range Counts(n) {
			if c > 1000 {
				continue // n² blocks: keep the run short
			}
			for name, m := range AllToAllCounts(c, n) {
				send, recv := make([][]byte, n), make([]*Guarded, n)
				sc, rc := make([][]int, n), make([][]int, n)
				for i := range n {
					sc[i] = m[i]
					rc[i] = make([]int, n)
					var v []int64
					for j := range n {
						rc[i][j] = m[j][i]
						for k := range m[i][j] {
							v = append(v, val(i, j, k))
						}
					}
					send[i] = Int64Bytes(v)
					tot := 0
					for j := range n {
						tot += rc[i][j]
					}
					recv[i] = NewGuarded(make([]byte, 8*tot))
				}
				err := Run(n, 8, nil, func(ctx context.Context, p algo.Peers) error {
					r := p.Rank()
					return fn(ctx, p, send[r][:len(send[r]):len(send[r])], sc[r], recv[r].Buf(), rc[r])
				})
				if err != nil {
					t.Fatalf("n=%d c=%d (%s): %v", n, c, name, err)
				}
				for i := range n {
					if err := recv[i].Check(); err != nil {
						t.Fatalf("n=%d c=%d (%s) rank %d: %v", n, c, name, i, err)
					}
					var want []int64
					for j := range n {
						for k := range m[j][i] {
							want = append(want, val(j, i, k))
						}
					}
					if got := Int64s(recv[i].Buf()); !slices.Equal(got, want) {
						t.Fatalf("n=%d c=%d (%s) rank %d: got %v, want %v", n, c, name, i, head(got), head(want))
					}
				}
			}
		}
	}
}

// TestBarrier checks that no rank leaves the barrier before every rank has
// entered it, over several rounds.
func TestBarrier(t *testing.T, fn algo.BarrierFunc) {
	t.Helper()
	for _, n := range WorldSizes {
		var entered atomic.Int64
		err := Run(n, 1, nil, func(ctx context.Context, p algo.Peers) error {
			for round := 1; round <= 5; round++ {
				entered.Add(1)
				if err := fn(ctx, p); err != nil {
					return err
				}
				if got := entered.Load(); got < int64(round*n) {
					return fmt.Errorf("round %d: left the barrier after %d entries, want at least %d", round, got, round*n)
				}
				// A second barrier so nobody enters round+1 before all checked.
				if err := fn(ctx, p); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
}

func head[T any](v []T) []T {
	if len(v) > 16 {
		return v[:16]
	}
	return v
}
