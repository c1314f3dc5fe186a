package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/commslog"
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

// Init is what a program started by a launcher calls (goccl run,
// torchrun, mpirun, srun): it reads the rank, world size and master
// address from the environment and connects to the other ranks over TCP.
// Here two ranks are goroutines given their environment with WithEnv.
func ExampleInit() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // a free port for the rendezvous
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx := context.Background()
	sums := make([]float32, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := goccl.Init(ctx, goccl.WithEnv(goccl.Env{Rank: r, Size: 2, LocalRank: r, LocalSize: 2,
				MasterAddr: "127.0.0.1", MasterPort: port}))
			if err != nil {
				fmt.Println(err)
				return
			}
			defer c.Close()
			v := []float32{float32(c.Rank() + 1)}
			if err := c.AllReduce(ctx, v, reduceop.Sum); err != nil {
				fmt.Println(err)
			}
			sums[r] = v[0]
		}()
	}
	wg.Wait()
	fmt.Println(sums)
	// Output: [3 3]
}

// Send and Recv pair by peer and tag; dtype and length are checked.
func ExampleComm_Send() {
	got := make([]int64, 3)
	err := goccl.RunLocal(context.Background(), 2, func(ctx context.Context, c *goccl.Comm) error {
		if c.Rank() == 0 {
			return c.Send(ctx, []int64{7, 8, 9}, 1, 42)
		}
		return c.Recv(ctx, got, 0, 42)
	})
	fmt.Println(got, err)

	// A Recv of another dtype is refused, not reinterpreted.
	err = goccl.RunLocal(context.Background(), 2, func(ctx context.Context, c *goccl.Comm) error {
		if c.Rank() == 0 {
			c.Send(ctx, []float32{1, 2, 3}, 1, 0)
			return nil
		}
		return c.Recv(ctx, make([]int32, 3), 0, 0)
	})
	fmt.Println(errors.Is(err, goccl.ErrMismatch))
	// Output:
	// [7 8 9] <nil>
	// true
}

// The comms logger records each of the user's calls (DeepSpeed's
// comms_logger); LogSummary prints the table.
func ExampleComm_CommsLog() {
	var ops []string
	goccl.RunLocal(context.Background(), 2, func(ctx context.Context, c *goccl.Comm) error {
		c.AllReduce(ctx, make([]float32, 1024), reduceop.Sum)
		c.Broadcast(ctx, make([]float32, 16), 0)
		if c.Rank() == 0 {
			for _, r := range c.CommsLog().Records() {
				ops = append(ops, fmt.Sprintf("%s %d B", r.Op, r.Bytes))
			}
		}
		return nil
	}, goccl.WithCommsLog(commslog.Config{Enabled: true}))
	fmt.Println(ops)
	// Output: [all_reduce 4096 B broadcast 64 B]
}
