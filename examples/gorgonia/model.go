package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Sizes of the model and its data set.
const (
	inputs  = 4
	hidden  = 16
	samples = 256
)

// dataset is a synthetic regression problem, the same on every rank:
// x uniform in [-1, 1)^inputs, y = sin(2 x0) + x1 x2 - x3/2 plus
// Gaussian noise. Rows are stored one after the other, so the rows of a
// batch, and of a rank's shard of it, are one contiguous run of x.
type dataset struct {
	x []float64 // samples × inputs
	y []float64 // samples
}

func makeDataset(seed uint64) dataset {
	rng := rand.New(rand.NewPCG(seed, 0x6f6e6e))
	d := dataset{x: make([]float64, samples*inputs), y: make([]float64, samples)}
	for i := range samples {
		x := d.x[i*inputs : (i+1)*inputs]
		for j := range x {
			x[j] = 2*rng.Float64() - 1
		}
		d.y[i] = math.Sin(2*x[0]) + x[1]*x[2] - x[3]/2 + 0.01*rng.NormFloat64()
	}
	return d
}

// rows returns rows [from, from+n) of the data set as tensors that share
// the data set's memory.
func (d dataset) rows(from, n int) (x, y *tensor.Dense) {
	x = tensor.New(tensor.WithShape(n, inputs), tensor.WithBacking(d.x[from*inputs:(from+n)*inputs]))
	y = tensor.New(tensor.WithShape(n, 1), tensor.WithBacking(d.y[from:from+n]))
	return x, y
}

// mlp is a two-layer perceptron, y = relu(x W1 + b1) W2 + b2, with its
// mean squared error and the gradients of it, as a Gorgonia graph for a
// batch of a fixed number of rows.
type mlp struct {
	g              *G.ExprGraph
	x, y           *G.Node
	w1, b1, w2, b2 *G.Node
	learnables     G.Nodes // w1, b1, w2, b2
	loss           *G.Node
	lossVal        G.Value
	vm             G.VM
}

// building serialises newMLP: Gorgonia's graph construction updates
// package-level counters unguarded (internal/encoding.NewGroup, run by
// Rectify), so ranks that run as goroutines of one process, as in
// goccl.RunLocal, must not build their graphs at once. Running the
// graphs concurrently is safe.
var building sync.Mutex

// newMLP builds the graph for batches of rows rows, with weights drawn
// from rng (Glorot-uniform; biases zero).
func newMLP(rows int, rng *rand.Rand) (*mlp, error) {
	building.Lock()
	defer building.Unlock()
	m := &mlp{g: G.NewGraph()}
	dt := tensor.Float64
	glorot := func(fanIn, fanOut int) *tensor.Dense {
		lim := math.Sqrt(6 / float64(fanIn+fanOut))
		w := make([]float64, fanIn*fanOut)
		for i := range w {
			w[i] = lim * (2*rng.Float64() - 1)
		}
		return tensor.New(tensor.WithShape(fanIn, fanOut), tensor.WithBacking(w))
	}
	m.x = G.NewMatrix(m.g, dt, G.WithShape(rows, inputs), G.WithName("x"))
	m.y = G.NewMatrix(m.g, dt, G.WithShape(rows, 1), G.WithName("y"))
	m.w1 = G.NewMatrix(m.g, dt, G.WithShape(inputs, hidden), G.WithName("w1"), G.WithValue(glorot(inputs, hidden)))
	m.b1 = G.NewMatrix(m.g, dt, G.WithShape(1, hidden), G.WithName("b1"), G.WithInit(G.Zeroes()))
	m.w2 = G.NewMatrix(m.g, dt, G.WithShape(hidden, 1), G.WithName("w2"), G.WithValue(glorot(hidden, 1)))
	m.b2 = G.NewMatrix(m.g, dt, G.WithShape(1, 1), G.WithName("b2"), G.WithInit(G.Zeroes()))
	m.learnables = G.Nodes{m.w1, m.b1, m.w2, m.b2}

	// Broadcast the bias rows over the batch (axis 0).
	xw1, err := G.Mul(m.x, m.w1)
	if err != nil {
		return nil, fmt.Errorf("x·w1: %w", err)
	}
	pre, err := G.BroadcastAdd(xw1, m.b1, nil, []byte{0})
	if err != nil {
		return nil, fmt.Errorf("+b1: %w", err)
	}
	h, err := G.Rectify(pre)
	if err != nil {
		return nil, fmt.Errorf("relu: %w", err)
	}
	hw2, err := G.Mul(h, m.w2)
	if err != nil {
		return nil, fmt.Errorf("h·w2: %w", err)
	}
	pred, err := G.BroadcastAdd(hw2, m.b2, nil, []byte{0})
	if err != nil {
		return nil, fmt.Errorf("+b2: %w", err)
	}
	diff, err := G.Sub(pred, m.y)
	if err != nil {
		return nil, fmt.Errorf("pred-y: %w", err)
	}
	sq, err := G.Square(diff)
	if err != nil {
		return nil, fmt.Errorf("square: %w", err)
	}
	if m.loss, err = G.Mean(sq); err != nil {
		return nil, fmt.Errorf("mean: %w", err)
	}
	G.Read(m.loss, &m.lossVal)
	if _, err := G.Grad(m.loss, m.learnables...); err != nil {
		return nil, fmt.Errorf("gradients: %w", err)
	}
	m.vm = G.NewTapeMachine(m.g, G.BindDualValues(m.learnables...))
	return m, nil
}

// forwardBackward computes the loss of one batch and leaves the gradients
// of the parameters in their nodes (Node.Grad).
func (m *mlp) forwardBackward(x, y *tensor.Dense) (float64, error) {
	defer m.vm.Reset()
	if err := G.Let(m.x, x); err != nil {
		return 0, err
	}
	if err := G.Let(m.y, y); err != nil {
		return 0, err
	}
	if err := m.vm.RunAll(); err != nil {
		return 0, err
	}
	return m.lossVal.Data().(float64), nil
}

// weights returns the parameters' values: each is the backing array of
// the Gorgonia tensor, not a copy.
func (m *mlp) weights() [][]float64 {
	var out [][]float64
	for _, n := range m.learnables {
		out = append(out, n.Value().Data().([]float64))
	}
	return out
}

// grads returns the parameters' gradients, likewise without copying.
func (m *mlp) grads() ([][]float64, error) {
	var out [][]float64
	for _, n := range m.learnables {
		g, err := n.Grad()
		if err != nil {
			return nil, fmt.Errorf("gradient of %s: %w", n.Name(), err)
		}
		out = append(out, g.Data().([]float64))
	}
	return out, nil
}

func (m *mlp) Close() error { return m.vm.Close() }
