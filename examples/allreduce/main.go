// Command allreduce is a smoke test for a goccl job: every rank joins with
// goccl.Init, then runs an allreduce, a broadcast from the last rank, an
// uneven all-to-all and collectives on two kinds of subgroup, checking each
// result against its closed form. Each rank prints one line
//
//	rank R/N ok source=... elems=... subgroups=...
//
// and exits with status 1 on the first mismatch or error.
//
// It runs under any launcher goccl.Init understands. With goccl's own
// launcher (build first, so that the ranks do not all compile it):
//
//	go build -o /tmp/goccl ./cmd/goccl
//	go build -o /tmp/allreduce ./examples/allreduce
//	/tmp/goccl run -n 4 -- /tmp/allreduce
//
// or, more slowly, go run ./cmd/goccl run -n 4 -- go run ./examples/allreduce.
// Under Slurm: srun -n 4 /tmp/allreduce. Under Open MPI:
// mpirun -np 4 /tmp/allreduce. By hand, as torchrun would set it, in two
// shells:
//
//	RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 /tmp/allreduce
//	RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 /tmp/allreduce
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

func main() {
	elems := flag.Int("elems", 1003, "length of the allreduced vector")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *elems); err != nil {
		fmt.Fprintf(os.Stderr, "allreduce: %v\n", err)
		cancel()
		os.Exit(1)
	}
}

func run(ctx context.Context, elems int) error {
	env, err := goccl.FromEnv()
	if err != nil {
		return err
	}
	c, err := goccl.Init(ctx, goccl.WithTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer c.Close()
	r, n := c.Rank(), c.Size()

	if err := checkAllReduce(ctx, c, elems); err != nil {
		return err
	}
	if err := checkBroadcast(ctx, c); err != nil {
		return err
	}
	if err := checkAllToAll(ctx, c); err != nil {
		return err
	}
	groups, err := checkSubgroups(ctx, c)
	if err != nil {
		return err
	}
	// Nobody leaves while a peer may still be reading from it.
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	fmt.Printf("rank %d/%d ok source=%s master=%s:%d elems=%d subgroups=%s\n",
		r, n, env.Source, env.MasterAddr, env.MasterPort, elems, groups)
	return nil
}

// checkAllReduce sums x[i] = (r+1)*i + r over ranks r, whose total is
// i*n(n+1)/2 + n(n-1)/2, and takes the max of a float vector.
func checkAllReduce(ctx context.Context, c *goccl.Comm, elems int) error {
	r, n := int64(c.Rank()), int64(c.Size())
	x := make([]int64, elems)
	y := make([]float64, elems)
	for i := range x {
		x[i] = (r+1)*int64(i) + r
		y[i] = float64(r) - float64(i)/4
	}
	if err := c.AllReduce(ctx, x, reduceop.Sum); err != nil {
		return err
	}
	if err := c.AllReduce(ctx, y, reduceop.Max); err != nil {
		return err
	}
	for i := range x {
		if want := int64(i)*n*(n+1)/2 + n*(n-1)/2; x[i] != want {
			return fmt.Errorf("rank %d: allreduce sum: element %d is %d, want %d", r, i, x[i], want)
		}
		if want := float64(n-1) - float64(i)/4; y[i] != want {
			return fmt.Errorf("rank %d: allreduce max: element %d is %v, want %v", r, i, y[i], want)
		}
	}
	return nil
}

// checkBroadcast sends the last rank's vector to everyone.
func checkBroadcast(ctx context.Context, c *goccl.Comm) error {
	root := c.Size() - 1
	buf := make([]float32, 17)
	for i := range buf {
		buf[i] = -1
		if c.Rank() == root {
			buf[i] = float32(100*root + i)
		}
	}
	if err := c.Broadcast(ctx, buf, root); err != nil {
		return err
	}
	for i, v := range buf {
		if want := float32(100*root + i); v != want {
			return fmt.Errorf("rank %d: broadcast from %d: element %d is %v, want %v", c.Rank(), root, i, v, want)
		}
	}
	return nil
}

// count is how many elements rank from sends to rank to in the all-to-all:
// uneven, and zero for some pairs.
func count(from, to int) int { return (from + 2*to) % 4 }

// value is element k of the block rank from sends to rank to.
func value(from, to, k int) int32 { return int32(from*10000 + to*100 + k) }

// checkAllToAll exchanges blocks of uneven sizes between every pair.
func checkAllToAll(ctx context.Context, c *goccl.Comm) error {
	r, n := c.Rank(), c.Size()
	sendCounts, recvCounts := make([]int, n), make([]int, n)
	var send []int32
	recvLen := 0
	for j := range n {
		sendCounts[j], recvCounts[j] = count(r, j), count(j, r)
		for k := range sendCounts[j] {
			send = append(send, value(r, j, k))
		}
		recvLen += recvCounts[j]
	}
	recv := make([]int32, recvLen)
	if err := c.AllToAllSplit(ctx, send, sendCounts, recv, recvCounts); err != nil {
		return err
	}
	off := 0
	for j := range n {
		for k := range recvCounts[j] {
			if got, want := recv[off+k], value(j, r, k); got != want {
				return fmt.Errorf("rank %d: all-to-all: element %d from rank %d is %d, want %d", r, k, j, got, want)
			}
		}
		off += recvCounts[j]
	}
	return nil
}

// checkSubgroups sums world ranks over the even ranks (NewGroup) and over
// each parity class ordered backwards (Split), and returns a summary.
func checkSubgroups(ctx context.Context, c *goccl.Comm) (string, error) {
	r, n := c.Rank(), c.Size()
	var evens []int
	for i := 0; i < n; i += 2 {
		evens = append(evens, i)
	}
	even, err := c.NewGroup(evens)
	if err != nil {
		return "", err
	}
	summary := "odd"
	if even != nil {
		sum := []int64{int64(r)}
		if err := even.AllReduce(ctx, sum, reduceop.Sum); err != nil {
			return "", err
		}
		k := int64(len(evens))
		if want := k * (k - 1); sum[0] != want { // 0+2+...+2(k-1)
			return "", fmt.Errorf("rank %d: allreduce on the even ranks gave %d, want %d", r, sum[0], want)
		}
		summary = fmt.Sprintf("even(%d/%d)", even.Rank(), even.Size())
	}

	// Split by parity, ordered by descending world rank.
	half, err := c.Split(ctx, r%2, -r)
	if err != nil {
		return "", err
	}
	members := 0
	var want int64
	for i := r % 2; i < n; i += 2 {
		members++
		want += int64(i)
	}
	if half.Size() != members || half.Ranks()[0] != members*2-2+r%2 {
		return "", fmt.Errorf("rank %d: split by parity: group ranks %v, want %d ranks in descending order", r, half.Ranks(), members)
	}
	sum := []int64{int64(r)}
	if err := half.AllReduce(ctx, sum, reduceop.Sum); err != nil {
		return "", err
	}
	if sum[0] != want {
		return "", fmt.Errorf("rank %d: allreduce on the split group gave %d, want %d", r, sum[0], want)
	}
	return fmt.Sprintf("%s,split(%d/%d)", summary, half.Rank(), half.Size()), nil
}
