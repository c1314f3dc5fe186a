package onebit

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// logreg is a logistic-regression problem: X (rows of d features) and 0/1
// labels y, split into equal shards, one per rank.
type logreg struct {
	d    int
	x    [][]float32
	y    []float32
	rank int
	size int
}

func newLogreg(n, d int) *logreg {
	r := rand.New(rand.NewPCG(7, 8))
	truth := make([]float64, d)
	for i := range truth {
		truth[i] = 2 * r.NormFloat64() / math.Sqrt(float64(d))
	}
	lr := &logreg{d: d}
	for range n {
		row := make([]float32, d)
		z := 0.3
		for i := range row {
			row[i] = float32(r.NormFloat64())
			z += truth[i] * float64(row[i])
		}
		label := float32(0)
		if r.Float64() < 1/(1+math.Exp(-z)) {
			label = 1
		}
		lr.x = append(lr.x, row)
		lr.y = append(lr.y, label)
	}
	return lr
}

// lossGrad returns the mean loss over rows [lo,hi) and writes its gradient
// with respect to w and b into gw, gb.
func (lr *logreg) lossGrad(w, b []float32, lo, hi int, gw, gb []float32) float64 {
	clear(gw)
	clear(gb)
	var loss float64
	for k := lo; k < hi; k++ {
		z := float64(b[0])
		for i, x := range lr.x[k] {
			z += float64(w[i]) * float64(x)
		}
		pr := 1 / (1 + math.Exp(-z))
		y := float64(lr.y[k])
		loss -= y*math.Log(pr+1e-12) + (1-y)*math.Log(1-pr+1e-12)
		g := float32((pr - y) / float64(hi-lo))
		for i, x := range lr.x[k] {
			gw[i] += g * x
		}
		gb[0] += g
	}
	return loss / float64(hi-lo)
}

// train runs Adam on 4 ranks, each on its shard, and returns the loss of
// rank 0's parameters on the whole data set and the bytes each rank sent.
func train(t *testing.T, data *logreg, cfg AdamConfig, steps, p int) (float64, []int64) {
	t.Helper()
	w := newFakeWorld(p)
	params := make([][][]float32, p)
	err := w.run(func(c *fakeComm) error {
		pw, pb := make([]float32, data.d), make([]float32, 1)
		params[c.rank] = [][]float32{pw, pb}
		opt, err := NewAdam(c, cfg, params[c.rank])
		if err != nil {
			return err
		}
		shard := len(data.x) / p
		gw, gb := make([]float32, data.d), make([]float32, 1)
		for range steps {
			data.lossGrad(pw, pb, c.rank*shard, (c.rank+1)*shard, gw, gb)
			if err := opt.Step(context.Background(), [][]float32{gw, gb}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gw, gb := make([]float32, data.d), make([]float32, 1)
	loss := data.lossGrad(params[0][0], params[0][1], 0, len(data.x), gw, gb)
	sent := make([]int64, p)
	for r := range sent {
		sent[r] = w.sent[r].Load()
	}
	return loss, sent
}

func TestAdamConverges(t *testing.T) {
	const p, steps = 4, 400
	data := newLogreg(2000, 63)
	cfg := AdamConfig{LR: 0.01, FreezeStep: 100}
	exact := cfg
	exact.FreezeStep = steps + 1
	lossExact, sentExact := train(t, data, exact, steps, p)
	lossOne, sentOne := train(t, data, cfg, steps, p)
	_, sentInit := train(t, data, exact, 0, p)
	t.Logf("final loss: exact Adam %.5f, 1-bit Adam %.5f (%.2f%%)", lossExact, lossOne, 100*(lossOne/lossExact-1))
	t.Logf("bytes sent per rank: exact Adam %v, 1-bit Adam %v (%d warmup steps)", sentExact, sentOne, cfg.FreezeStep)
	if math.Abs(lossOne/lossExact-1) > 0.05 {
		t.Errorf("1-bit Adam loss %g not within 5%% of exact Adam's %g", lossOne, lossExact)
	}
	// Bytes hold the formulas: warmup steps as ring allreduces, the rest compressed.
	wantOne := int64(cfg.FreezeStep)*(RingAllReduceBytes(63, p)+RingAllReduceBytes(1, p)) +
		int64(steps-cfg.FreezeStep)*(WireBytes(63, p)+WireBytes(1, p))
	for r := range p {
		if sentInit[r] != 0 || sentOne[r] != wantOne {
			t.Errorf("rank %d sent %d bytes, want %d", r, sentOne[r], wantOne)
		}
	}
}

func TestAdamValidation(t *testing.T) {
	w := newFakeWorld(1)
	opt, err := NewAdam(w.comm(0), AdamConfig{}, [][]float32{make([]float32, 3)})
	if err != nil {
		t.Fatal(err)
	}
	if err := opt.Step(context.Background(), [][]float32{make([]float32, 2)}); !errors.Is(err, ErrSize) {
		t.Errorf("short gradient: err = %v", err)
	}
	if err := opt.Step(context.Background(), nil); !errors.Is(err, ErrSize) {
		t.Errorf("no gradients: err = %v", err)
	}
	if _, err := NewAdam(nil, AdamConfig{}, nil); err == nil {
		t.Error("nil Comm accepted")
	}
}

// TestAdamReference compares Adam with a dumb float64 loop: over p ranks in
// warmup (gradients averaged exactly), and over one rank through the
// compression stage, where nothing is sent and v stays frozen.
func TestAdamReference(t *testing.T) {
	cfg := AdamConfig{LR: 0.1, Beta1: 0.8, Beta2: 0.9, Eps: 1e-3, WeightDecay: 0.01, FreezeStep: 4}
	const n, steps = 5, 9
	grad := func(r, s, i int) float32 { return float32(math.Sin(float64(1 + r + 7*s + 3*i))) }
	for _, p := range []int{1, 3} {
		nsteps := steps
		if p > 1 {
			nsteps = cfg.FreezeStep // exact part only
		}
		// The reference.
		w, m, v := make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range w {
			w[i] = float64(i) / 4
		}
		for s := range nsteps {
			for i := range n {
				var g float64
				for r := range p {
					g += float64(grad(r, s, i)) / float64(p)
				}
				m[i] = float64(cfg.Beta1)*m[i] + (1-float64(cfg.Beta1))*g
				if s < cfg.FreezeStep {
					v[i] = float64(cfg.Beta2)*v[i] + (1-float64(cfg.Beta2))*g*g
				}
				w[i] -= float64(cfg.LR) * (m[i]/(math.Sqrt(v[i])+float64(cfg.Eps)) + float64(cfg.WeightDecay)*w[i])
			}
		}
		world := newFakeWorld(p)
		err := world.run(func(c *fakeComm) error {
			pw := make([]float32, n)
			for i := range pw {
				pw[i] = float32(i) / 4
			}
			opt, err := NewAdam(c, cfg, [][]float32{pw})
			if err != nil {
				return err
			}
			for s := range nsteps {
				g := make([]float32, n)
				for i := range g {
					g[i] = grad(c.rank, s, i)
				}
				if err := opt.Step(context.Background(), [][]float32{g}); err != nil {
					return err
				}
			}
			for i := range pw {
				if math.Abs(float64(pw[i])-w[i]) > 1e-5 {
					t.Errorf("p=%d rank %d: w[%d] = %g, want %g", p, c.rank, i, pw[i], w[i])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if p == 1 && world.sent[0].Load() != 0 {
			t.Errorf("one rank sent %d bytes", world.sent[0].Load())
		}
	}
}
