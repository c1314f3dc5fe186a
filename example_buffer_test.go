package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// A 0-d value, such as a loss or a scalar parameter, has no slice type of
// its own: pass a one-element slice. unsafe.Slice(&x, 1) aliases x, so the
// collective writes x itself; []float64{loss} is a copy, read back from
// its element.
func ExampleComm_AllReduce_scalar() {
	ctx := context.Background()
	scales := make([]float32, 2)
	losses := make([]float64, 2)
	err := goccl.RunLocal(ctx, 2, func(ctx context.Context, c *goccl.Comm) error {
		scale := float32(1 + 15*c.Rank()) // a scalar parameter: 1 on rank 0, 16 on rank 1
		if err := c.AllReduce(ctx, unsafe.Slice(&scale, 1), reduceop.Max); err != nil {
			return err
		}
		loss := 0.5 + float64(c.Rank())
		buf := []float64{loss}
		if err := c.AllReduce(ctx, buf, reduceop.Avg); err != nil {
			return err
		}
		scales[c.Rank()], losses[c.Rank()] = scale, buf[0]
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("scale:", scales)
	fmt.Println("mean loss:", losses)
	// Output:
	// scale: [16 16]
	// mean loss: [1 1]
}

// A buffer is contiguous: goccl reduces every element of the slice it is
// given. A strided view, here one column of a row-major matrix, is not a
// slice of its own; its backing array holds the other columns too. Copy
// the view into a contiguous buffer, reduce that, and copy it back.
func ExampleComm_AllReduce_stridedView() {
	ctx := context.Background()
	const rows, cols = 3, 2
	results := make([][]float32, 2)
	err := goccl.RunLocal(ctx, 2, func(ctx context.Context, c *goccl.Comm) error {
		// Row-major: m[i*cols+j]. Column 1 is m[1], m[3], m[5].
		m := make([]float32, rows*cols)
		for i := range m {
			m[i] = float32(10*c.Rank() + i)
		}
		col := make([]float32, rows)
		for i := range rows {
			col[i] = m[i*cols+1]
		}
		if err := c.AllReduce(ctx, col, reduceop.Sum); err != nil {
			return err
		}
		for i := range rows {
			m[i*cols+1] = col[i]
		}
		results[c.Rank()] = m
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("rank 0:", results[0]) // column 0 is rank 0's own
	fmt.Println("rank 1:", results[1]) // column 0 is rank 1's own
	// Output:
	// rank 0: [0 12 2 16 4 20]
	// rank 1: [10 12 12 16 14 20]
}

// A framework's 16-bit float is often a named uint16 (GoMLX's
// bfloat16.BFloat16 is one), and its Go type cannot say which format it
// holds: goccl takes such a slice as uint16. As says the format, over the
// same memory; here the ranks average bfloat16 values.
func ExampleAs() {
	type bfloat16 uint16 // as a framework declares it
	ctx := context.Background()
	means := make([]float32, 2)
	err := goccl.RunLocal(ctx, 2, func(ctx context.Context, c *goccl.Comm) error {
		x := []bfloat16{bfloat16(reduceop.BF16FromFloat32(float32(c.Rank()) + 0.5))}
		// Without As, x is a []uint16, and Avg on integers is refused.
		if err := c.AllReduce(ctx, x, reduceop.Avg); !errors.Is(err, goccl.ErrInvalid) {
			return fmt.Errorf("avg on a []uint16: %v", err)
		}
		if err := c.AllReduce(ctx, goccl.As(x, reduceop.BFloat16), reduceop.Avg); err != nil {
			return err
		}
		means[c.Rank()] = reduceop.BF16(x[0]).Float32()
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("mean:", means)
	// Output:
	// mean: [1 1]
}
