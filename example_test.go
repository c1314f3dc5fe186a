package goccl_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// Four ranks, as goroutines in one process, sum a gradient.
func ExampleComm_AllReduce() {
	ctx := context.Background()
	var mu sync.Mutex
	results := make([][]float32, 4)
	err := goccl.RunLocal(ctx, 4, func(ctx context.Context, c *goccl.Comm) error {
		grad := []float32{float32(c.Rank()), 1, 2}
		if err := c.AllReduce(ctx, grad, reduceop.Sum); err != nil {
			return err
		}
		mu.Lock()
		results[c.Rank()] = grad
		mu.Unlock()
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(results[0], results[3])
	// Output: [6 4 8] [6 4 8]
}

// Rank 0's parameters reach every rank.
func ExampleComm_Broadcast() {
	ctx := context.Background()
	got := make([][]int64, 3)
	err := goccl.RunLocal(ctx, 3, func(ctx context.Context, c *goccl.Comm) error {
		params := []int64{0, 0}
		if c.Rank() == 0 {
			params = []int64{42, 7}
		}
		got[c.Rank()] = params
		return c.Broadcast(ctx, params, 0)
	})
	fmt.Println(got, err)
	// Output: [[42 7] [42 7] [42 7]] <nil>
}

// Every rank contributes a block; every rank gets all blocks in rank order.
func ExampleComm_AllGather() {
	ctx := context.Background()
	got := make([][]int32, 3)
	err := goccl.RunLocal(ctx, 3, func(ctx context.Context, c *goccl.Comm) error {
		recv := make([]int32, 3*2)
		got[c.Rank()] = recv
		return c.AllGather(ctx, []int32{int32(c.Rank()), int32(10 * c.Rank())}, recv)
	})
	fmt.Println(got[1], err)
	// Output: [0 0 1 10 2 20] <nil>
}

// Each rank ends with the sum of its own block.
func ExampleComm_ReduceScatter() {
	ctx := context.Background()
	got := make([][]float64, 2)
	err := goccl.RunLocal(ctx, 2, func(ctx context.Context, c *goccl.Comm) error {
		recv := make([]float64, 2)
		got[c.Rank()] = recv
		return c.ReduceScatter(ctx, []float64{1, 2, 3, 4}, recv, reduceop.Sum)
	})
	fmt.Println(got, err)
	// Output: [[2 4] [6 8]] <nil>
}

// Any gob-encodable value can be gathered.
func ExampleAllGatherObject() {
	ctx := context.Background()
	var names []string
	err := goccl.RunLocal(ctx, 3, func(ctx context.Context, c *goccl.Comm) error {
		all, err := goccl.AllGatherObject(ctx, c, fmt.Sprintf("worker-%d", c.Rank()))
		if c.Rank() == 0 {
			names = all
		}
		return err
	})
	fmt.Println(names, err)
	// Output: [worker-0 worker-1 worker-2] <nil>
}
