package onebit

import (
	"context"
	"fmt"
	"math"

	"github.com/goccl/goccl/reduceop"
)

// AdamConfig holds the hyper-parameters of Adam. A zero LR, Beta1, Beta2 or
// Eps takes DeepSpeed's default (1e-3, 0.9, 0.999, 1e-8); WeightDecay and
// FreezeStep are used as given (DeepSpeed's default FreezeStep is 100000;
// here 0 means compressing from the first step).
type AdamConfig struct {
	LR, Beta1, Beta2, Eps float32
	WeightDecay           float32
	FreezeStep            int // steps 0..FreezeStep-1 are exact Adam (warmup)
}

func (c AdamConfig) withDefaults() AdamConfig {
	if c.LR == 0 {
		c.LR = 1e-3
	}
	if c.Beta1 == 0 {
		c.Beta1 = 0.9
	}
	if c.Beta2 == 0 {
		c.Beta2 = 0.999
	}
	if c.Eps == 0 {
		c.Eps = 1e-8
	}
	return c
}

// Adam is DeepSpeed's OnebitAdam over a Comm: data-parallel Adam whose
// momentum, after a warmup, travels through CompressedAllReduce.
//
// Warmup, steps t < FreezeStep: the gradients are averaged over the ranks
// with an uncompressed AllReduce (Sum, then times 1/p) and Adam runs exactly:
//
//	m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²
//
// Compression stage, t >= FreezeStep: v is frozen; m = β1 m + (1-β1) g with
// the local gradient; then m is replaced by its compressed average (error
// feedback in a State per parameter; with one rank nothing is sent and m is
// used as is, as DeepSpeed does). Every step then updates
//
//	p -= lr * (m / (sqrt(v) + eps) + weightDecay * p)
//
// without bias correction, as OnebitAdam does. (OnebitAdam also spends its
// very first step() on setting up buffers without updating; Adam does not.)
// The State of a parameter of n elements is padded to PaddedLenAdam(n, p),
// as OnebitAdam pads.
type Adam struct {
	cfg    AdamConfig
	comm   Comm
	params [][]float32
	m, v   [][]float32
	states []*State
	step   int
}

// NewAdam returns the optimizer for params, a list of parameter tensors
// that Step updates in place; their lengths fix the gradient lengths.
func NewAdam(c Comm, cfg AdamConfig, params [][]float32) (*Adam, error) {
	if c == nil {
		return nil, fmt.Errorf("onebit: NewAdam: nil Comm")
	}
	p := c.Size()
	if p < 1 {
		return nil, fmt.Errorf("onebit: NewAdam: world size %d < 1", p)
	}
	a := &Adam{cfg: cfg.withDefaults(), comm: c, params: params}
	for _, w := range params {
		a.m = append(a.m, make([]float32, len(w)))
		a.v = append(a.v, make([]float32, len(w)))
		st, err := NewStatePadded(len(w), p, PaddedLenAdam(len(w), p))
		if err != nil {
			return nil, err
		}
		a.states = append(a.states, st)
	}
	return a, nil
}

// Steps returns the number of completed steps.
func (a *Adam) Steps() int { return a.step }

// Compressing reports whether the next Step runs in the compression stage.
func (a *Adam) Compressing() bool { return a.step >= a.cfg.FreezeStep }

// Step applies one update from grads, one gradient per parameter with the
// parameter's length. During warmup the grads are overwritten with their
// average over the ranks. Every rank calls Step together.
func (a *Adam) Step(ctx context.Context, grads [][]float32) error {
	if len(grads) != len(a.params) {
		return fmt.Errorf("%w: adam step: %d gradients for %d parameters", ErrSize, len(grads), len(a.params))
	}
	for i, g := range grads {
		if len(g) != len(a.params[i]) {
			return fmt.Errorf("%w: adam step: gradient %d has %d elements, parameter %d", ErrSize, i, len(g), len(a.params[i]))
		}
	}
	c := a.cfg
	b1, b2 := c.Beta1, c.Beta2
	warm := !a.Compressing()
	p := a.comm.Size()
	for i, g := range grads {
		m, v, w := a.m[i], a.v[i], a.params[i]
		if warm {
			if err := a.comm.AllReduce(ctx, g, reduceop.Sum); err != nil {
				return fmt.Errorf("onebit: adam step %d rank %d: gradient allreduce: %w", a.step, a.comm.Rank(), err)
			}
			inv := float32(1 / float64(p))
			for j := range g {
				g[j] *= inv
				m[j] = b1*m[j] + (1-b1)*g[j]
				v[j] = b2*v[j] + (1-b2)*g[j]*g[j]
			}
		} else {
			for j := range g {
				m[j] = b1*m[j] + (1-b1)*g[j]
			}
			if p > 1 {
				if err := CompressedAllReduce(ctx, a.comm, m, a.states[i]); err != nil {
					return fmt.Errorf("onebit: adam step %d: %w", a.step, err)
				}
			}
		}
		for j := range w {
			u := m[j]/(float32(math.Sqrt(float64(v[j])))+c.Eps) + c.WeightDecay*w[j]
			w[j] -= c.LR * u
		}
	}
	a.step++
	return nil
}
