//go:build cuda

package cuda_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

// TestCompressedAllReduceOnCUDA runs onebit's compressed allreduce on
// device buffers with our kernels, 2 to 4 ranks as goroutines sharing the
// GPU through goccl's device data path, beside the host algorithm on the
// same inputs. One step: the signs of every output exactly, the values to
// float rounding (the device sums the squares in another order, so its
// scales may differ in the last bit).
func TestCompressedAllReduceOnCUDA(t *testing.T) {
	c := open(t)
	for _, p := range []int{2, 3, 4} {
		for _, n := range []int{1, 1000, 4099, 1<<20 + 3} {
			t.Run(fmt.Sprintf("p=%d/n=%d", p, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				err := goccl.RunLocal(ctx, p, func(ctx context.Context, comm *goccl.Comm) error {
					rank := comm.Rank()
					s, err := c.NewStream()
					if err != nil {
						return err
					}
					defer s.Destroy()
					st, err := onebit.NewDeviceState(c, c.Kernel(), n, p)
					if err != nil {
						return err
					}
					defer st.Free()
					b, err := c.Alloc(reduceop.Float32, n)
					if err != nil {
						return err
					}
					defer b.Free()
					buf := b.(*cuda.Buffer)
					r := rand.New(rand.NewPCG(uint64(n), uint64(rank)))
					x := make([]float32, n)
					for i := range x {
						x[i] = float32(r.NormFloat64())
					}
					raw := func(v []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)) }
					if err := buf.CopyFromHost(ctx, 0, raw(x)); err != nil {
						return err
					}
					hst, err := onebit.NewState(n, p)
					if err != nil {
						return err
					}
					if err := onebit.CompressedAllReduce(ctx, comm, x, hst); err != nil {
						return err
					}
					if err := onebit.CompressedAllReduceOn(ctx, comm, s, buf, st); err != nil {
						return err
					}
					if err := s.Synchronize(ctx); err != nil {
						return err
					}
					got := make([]float32, n)
					if err := buf.CopyToHost(ctx, raw(got), 0); err != nil {
						return err
					}
					for i := range x {
						if math.Signbit(float64(got[i])) != math.Signbit(float64(x[i])) ||
							math.Abs(float64(got[i]-x[i])) > 1e-5*math.Abs(float64(x[i])) {
							return fmt.Errorf("rank %d: element %d = %v on the GPU, %v on the host", rank, i, got[i], x[i])
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
