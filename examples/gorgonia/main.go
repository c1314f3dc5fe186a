// Command gorgonia trains a small Gorgonia model data-parallel with goccl,
// the way a framework embeds a collective library: Gorgonia builds the
// graph and computes the gradients, goccl averages them across ranks.
//
// The model is a two-layer perceptron (4 inputs, 16 hidden ReLU units,
// one output) fitted by mean squared error to a synthetic, seeded data set
// that every rank generates alike. Every step each rank takes its shard of
// the batch (rank r of n takes rows [r·b/n, (r+1)·b/n) of a batch of b),
// runs Gorgonia's forward and backward pass on it, hands the gradient
// tensors' backing arrays (Data(), a []float64 each) to goccl's
// AllReduceCoalesced with reduceop.Avg, and takes a plain SGD step with
// Gorgonia's VanillaSolver. The initial weights are rank 0's, broadcast to
// all; the others' own random draws are overwritten.
//
// At the end the program checks two things and exits 1 if either fails:
//
//   - every rank holds bit-identical weights (a checksum, gathered with
//     AllGather);
//   - they match a one-process run over whole batches, which rank 0 trains
//     afterwards from the same initial weights, to within -tol (relative,
//     default 1e-12).
//
// Why not bit for bit: each rank sums its shard's per-sample gradients
// and goccl then sums the ranks' results, where one process sums the whole
// batch in one sequence. Floating-point addition is not associative, so
// the two gradients can differ in their last bit every step, whatever the
// batch and shard sizes; a power-of-two batch (32) and rank count (2 or 4)
// only make the scale factors, 1/16 or 1/8 per shard and then 1/2 or 1/4
// in the average, exact. Gradient descent at this learning rate does not
// amplify those roundings: the runs measured differ by 1.1e-16 (2 ranks)
// and 2.2e-16 (4 ranks) after the default 160 steps, and by at most
// 2.3e-15 after 2400 to 4800 steps, so 1e-12 leaves a margin of more than
// four hundred. Real faults are off by far more: summing where the average
// belongs, or every rank training on the first shard, ends 0.12 away;
// ranks that skip the broadcast fail the checksum.
//
// Every rank prints
//
//	rank R/N ok checksum=... max_rel_diff_one_process=...
//
// Run it with goccl's launcher (build first, so that the ranks do not all
// compile it):
//
//	go build -o /tmp/goccl ./cmd/goccl                  # in the repository root
//	cd examples/gorgonia && go build -o /tmp/gorgonia-dp .
//	/tmp/goccl run -n 2 -- /tmp/gorgonia-dp
//	/tmp/goccl run -n 4 -- /tmp/gorgonia-dp
//
// or alone, as a one-rank job: GOCCL_TRANSPORT=mem /tmp/gorgonia-dp.
//
// This directory is a module of its own, so that goccl does not depend on
// Gorgonia; its go.mod points at the repository root with a replace
// directive.
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
	G "gorgonia.org/gorgonia"
)

// config is the training run, the same on every rank.
type config struct {
	batch  int
	epochs int
	lr     float64
	tol    float64
	quiet  bool
}

func main() {
	var cfg config
	flag.IntVar(&cfg.batch, "batch", 32, "rows per batch, split evenly among the ranks")
	flag.IntVar(&cfg.epochs, "epochs", 20, "passes over the data set")
	flag.Float64Var(&cfg.lr, "lr", 0.05, "learning rate")
	flag.Float64Var(&cfg.tol, "tol", 1e-12, "largest relative difference allowed from the one-process run")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "gorgonia: %v\n", err)
		cancel()
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	c, err := goccl.Init(ctx, goccl.WithTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer c.Close()
	r, n := c.Rank(), c.Size()
	data := makeDataset(1)
	got, err := train(ctx, c, data, cfg)
	if err != nil {
		return err
	}

	// Every rank must hold the same weights, to the bit.
	sums := make([]int64, n)
	if err := c.AllGather(ctx, []int64{int64(checksum(got.weights))}, sums); err != nil {
		return fmt.Errorf("gathering checksums: %w", err)
	}
	for p, s := range sums {
		if s != sums[0] {
			return fmt.Errorf("rank %d's weights (checksum %016x) differ from rank 0's (%016x)", p, uint64(s), uint64(sums[0]))
		}
	}

	// Rank 0 trains the same model in one process over whole batches and
	// tells everyone how far apart the two are. A 0-d value travels as a
	// one-element slice.
	diff := []float64{0}
	if r == 0 {
		want, err := trainAlone(ctx, data, cfg)
		if err != nil {
			return fmt.Errorf("one-process run: %w", err)
		}
		diff[0] = maxRelDiff(got.weights, want.weights)
	}
	if err := c.Broadcast(ctx, diff, 0); err != nil {
		return fmt.Errorf("broadcasting the difference: %w", err)
	}
	if !(diff[0] <= cfg.tol) {
		return fmt.Errorf("weights differ from the one-process run by %.3g (relative), more than -tol %.3g", diff[0], cfg.tol)
	}
	// Ten epochs are enough to quarter the loss; fewer prove nothing.
	if cfg.epochs >= 10 && !(got.lastLoss < got.firstLoss/4) {
		return fmt.Errorf("the model did not learn: loss %.4g in the first epoch, %.4g in the last", got.firstLoss, got.lastLoss)
	}
	fmt.Printf("rank %d/%d ok checksum=%016x max_rel_diff_one_process=%.3g\n", r, n, uint64(sums[0]), diff[0])
	return nil
}

// result is what a training run ends with.
type result struct {
	weights             [][]float64 // w1, b1, w2, b2
	firstLoss, lastLoss float64     // mean loss over the first and the last epoch
}

// train fits the model data-parallel over c: each rank forwards and
// backwards its shard of every batch with Gorgonia, and goccl averages the
// gradients before every rank takes the same SGD step.
func train(ctx context.Context, c *goccl.Comm, data dataset, cfg config) (result, error) {
	r, n := c.Rank(), c.Size()
	if cfg.batch < n || cfg.batch%n != 0 || samples%cfg.batch != 0 {
		return result{}, fmt.Errorf("-batch %d: want a multiple of the %d ranks that divides the %d samples", cfg.batch, n, samples)
	}
	shard := cfg.batch / n
	// Each rank draws its own initial weights, as independent processes
	// would; the broadcast below replaces them with rank 0's.
	m, err := newMLP(shard, rand.New(rand.NewPCG(uint64(r), 7)))
	if err != nil {
		return result{}, err
	}
	defer m.Close()
	for _, w := range m.weights() {
		if err := c.Broadcast(ctx, w, 0); err != nil {
			return result{}, fmt.Errorf("broadcasting initial weights: %w", err)
		}
	}

	solver := G.NewVanillaSolver(G.WithLearnRate(cfg.lr))
	batches := samples / cfg.batch
	var res result
	loss := make([]float64, 1) // the scalar loss, averaged along with the gradients
	for epoch := range cfg.epochs {
		var sum float64
		for b := range batches {
			x, y := data.rows(b*cfg.batch+r*shard, shard)
			l, err := m.forwardBackward(x, y)
			if err != nil {
				return result{}, fmt.Errorf("epoch %d batch %d: forward/backward: %w", epoch, b, err)
			}
			grads, err := m.grads()
			if err != nil {
				return result{}, err
			}
			// The gradient tensors' own memory goes to goccl: averaged in
			// place, then read by the solver.
			bufs := make([]any, 0, len(grads)+1)
			for _, g := range grads {
				bufs = append(bufs, g)
			}
			loss[0] = l
			bufs = append(bufs, loss)
			if err := c.AllReduceCoalesced(ctx, bufs, reduceop.Avg); err != nil {
				return result{}, fmt.Errorf("epoch %d batch %d: averaging gradients: %w", epoch, b, err)
			}
			if err := solver.Step(G.NodesToValueGrads(m.learnables)); err != nil {
				return result{}, fmt.Errorf("epoch %d batch %d: SGD step: %w", epoch, b, err)
			}
			sum += loss[0]
		}
		mean := sum / float64(batches)
		if epoch == 0 {
			res.firstLoss = mean
		}
		res.lastLoss = mean
		if r == 0 && !cfg.quiet && (epoch%5 == 0 || epoch == cfg.epochs-1) {
			fmt.Printf("epoch %d loss %.6f\n", epoch, mean)
		}
	}
	for _, w := range m.weights() {
		res.weights = append(res.weights, append([]float64(nil), w...))
	}
	return res, nil
}

// trainAlone is the one-process run: the same training over a world of
// one rank, which takes whole batches.
func trainAlone(ctx context.Context, data dataset, cfg config) (result, error) {
	comms, err := goccl.NewLocal(1)
	if err != nil {
		return result{}, err
	}
	defer comms[0].Close()
	cfg.quiet = true
	return train(ctx, comms[0], data, cfg)
}

// checksum hashes the weights' bits.
func checksum(ws [][]float64) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, w := range ws {
		for _, v := range w {
			binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
			h.Write(b[:])
		}
	}
	return h.Sum64()
}

// maxRelDiff is the largest |a-b| / max(1, |b|) over the weights, +Inf
// if their shapes differ or a weight is not finite.
func maxRelDiff(a, b [][]float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return math.Inf(1)
		}
		for j, v := range a[i] {
			e := math.Abs(v-b[i][j]) / max(1, math.Abs(b[i][j]))
			if math.IsNaN(e) {
				return math.Inf(1)
			}
			d = max(d, e)
		}
	}
	return d
}
