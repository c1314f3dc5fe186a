// Command dataparallel trains a linear regression data-parallel, the way
// DistributedDataParallel trains a model: each rank holds its own shard of
// a synthetic data set, rank 0's initial parameters are broadcast to all,
// and every step the ranks average their gradients with AllReduce(Avg)
// before taking the same gradient step. At the end the ranks compare a
// checksum of their parameters with AllGather: they must be bit-identical.
//
// Rank 0 prints the loss as it trains; every rank prints
//
//	rank R/N ok loss=... checksum=...
//
// and exits with status 1 if the parameters differ between ranks or the
// model did not learn the true weights.
//
// Run it with goccl's launcher (build first, so that the ranks do not all
// compile it):
//
//	go build -o /tmp/goccl ./cmd/goccl
//	go build -o /tmp/dataparallel ./examples/dataparallel
//	/tmp/goccl run -n 4 -- /tmp/dataparallel
//
// or under srun, mpirun or torchrun's environment variables, as
// examples/allreduce shows.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// features is the number of inputs of the model y = w·x + b.
const features = 8

// trueWeight is the weight the data set was made with: w_j = (j+1)/4 - 1,
// and the bias is the last entry.
func trueWeight(j int) float64 {
	if j == features {
		return 0.5
	}
	return float64(j+1)/4 - 1
}

func main() {
	perRank := flag.Int("samples", 256, "training samples per rank")
	steps := flag.Int("steps", 300, "gradient steps")
	lr := flag.Float64("lr", 0.1, "learning rate")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *perRank, *steps, *lr); err != nil {
		fmt.Fprintf(os.Stderr, "dataparallel: %v\n", err)
		cancel()
		os.Exit(1)
	}
}

// shard is one rank's part of the data set: rows of x, and y.
type shard struct {
	x [][features]float64
	y []float64
}

// makeShard draws rank's samples: x uniform in [-1, 1), y = w·x + b plus
// Gaussian noise of standard deviation 0.01. Each rank's stream is seeded
// by its rank, so the shards differ and the run is reproducible.
func makeShard(rank, n int) shard {
	rng := rand.New(rand.NewPCG(uint64(rank), 0x601cc1))
	s := shard{x: make([][features]float64, n), y: make([]float64, n)}
	for i := range n {
		y := trueWeight(features)
		for j := range features {
			s.x[i][j] = 2*rng.Float64() - 1
			y += trueWeight(j) * s.x[i][j]
		}
		s.y[i] = y + 0.01*rng.NormFloat64()
	}
	return s
}

// gradient returns the gradient of the mean squared error over the shard
// with respect to params (weights, then bias) and the loss itself. The
// loss is sent along in the last slot so that one AllReduce averages both.
func (s shard) gradient(params []float64) []float64 {
	g := make([]float64, features+2)
	for i, x := range s.x {
		pred := params[features]
		for j := range features {
			pred += params[j] * x[j]
		}
		d := pred - s.y[i]
		for j := range features {
			g[j] += 2 * d * x[j]
		}
		g[features] += 2 * d
		g[features+1] += d * d
	}
	for j := range g {
		g[j] /= float64(len(s.x))
	}
	return g
}

func run(ctx context.Context, perRank, steps int, lr float64) error {
	c, err := goccl.Init(ctx, goccl.WithTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer c.Close()
	r, n := c.Rank(), c.Size()
	data := makeShard(r, perRank)

	// Start from rank 0's random parameters, whatever the others drew.
	params := make([]float64, features+1)
	rng := rand.New(rand.NewPCG(uint64(1000+r), 1))
	for j := range params {
		params[j] = rng.NormFloat64()
	}
	if err := c.Broadcast(ctx, params, 0); err != nil {
		return err
	}

	var loss float64
	for step := range steps {
		g := data.gradient(params)
		// Equal shards, so the average of the ranks' mean gradients is the
		// mean gradient over the whole data set.
		if err := c.AllReduce(ctx, g, reduceop.Avg); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		for j := range params {
			params[j] -= lr * g[j]
		}
		loss = g[features+1]
		if r == 0 && (step%100 == 0 || step == steps-1) {
			fmt.Printf("step %d loss %.6f\n", step, loss)
		}
	}

	sums := make([]int64, n)
	if err := c.AllGather(ctx, []int64{checksum(params)}, sums); err != nil {
		return err
	}
	for q, s := range sums {
		if s != sums[0] {
			return fmt.Errorf("rank %d: parameters differ between ranks: checksum of rank %d is %x, of rank 0 %x", r, q, s, sums[0])
		}
	}
	for j, p := range params {
		if math.Abs(p-trueWeight(j)) > 0.01 {
			return fmt.Errorf("rank %d: parameter %d is %.4f after %d steps, want %.4f", r, j, p, steps, trueWeight(j))
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if r == 0 {
		fmt.Printf("final loss %.6f over %d samples on %d ranks\n", loss, n*perRank, n)
	}
	fmt.Printf("rank %d/%d ok loss=%.6f checksum=%016x\n", r, n, loss, uint64(sums[r]))
	return nil
}

// checksum hashes the parameters' bits.
func checksum(params []float64) int64 {
	h := fnv.New64a()
	var b []byte
	for _, p := range params {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p))
	}
	h.Write(b)
	return int64(h.Sum64())
}
