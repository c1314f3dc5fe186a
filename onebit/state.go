package onebit

import (
	"errors"
	"fmt"
)

// State is the error-feedback state of one tensor: the worker error (one
// value per padded element) and the server error (one value per element of
// the chunk this rank owns), plus the scratch buffers one compressed
// allreduce needs, allocated once. Keep one State per tensor and pass it to
// every CompressedAllReduce of that tensor. A State is not safe for
// concurrent use.
type State struct {
	n, padded, world int

	workerErr []float32 // padded
	serverErr []float32 // padded/world

	sendBits   []uint8   // padded/8, this rank's worker signs
	recvBits   []uint8   // padded/8, block j = worker j's signs of my chunk
	serverAcc  []float32 // padded/world
	serverBits []uint8   // padded/world/8
	gathered   []uint8   // padded/8, every rank's server signs
	scale      []float32 // 1, scratch for sending a scale
	scales     []float32 // world, worker scales
	sscales    []float32 // world, server scales

	kernel Kernel
}

// ErrSize is returned (wrapped) when a buffer, a State and a communicator do
// not fit together.
var ErrSize = errors.New("onebit: size mismatch")

// PaddedLen returns the length DeepSpeed's compressed allreduce pads a
// buffer of n elements to when the world has worldSize ranks: the smallest
// multiple of 8*worldSize that is at least n, so that every rank's chunk
// packs into whole bytes.
func PaddedLen(n, worldSize int) int {
	m := 8 * worldSize
	return (n + m - 1) / m * m
}

// NewState returns the State for a tensor of n elements compressed over
// worldSize ranks, padded to PaddedLen(n, worldSize), with zero errors.
func NewState(n, worldSize int) (*State, error) {
	if worldSize < 1 {
		return nil, fmt.Errorf("onebit: NewState: world size %d < 1", worldSize)
	}
	return NewStatePadded(n, worldSize, PaddedLen(n, worldSize))
}

// NewStatePadded is NewState with the padded length given: padded must be at
// least n and a multiple of 8*worldSize. The padded length changes the
// numbers (the worker scale divides by its square root). DeepSpeed's
// OnebitAdam pads to a multiple of worldSize*lcm(worldSize, 8), which is
// what Adam uses; for 1, 2, 4 and 8 ranks that equals PaddedLen.
func NewStatePadded(n, worldSize, padded int) (*State, error) {
	switch {
	case worldSize < 1:
		return nil, fmt.Errorf("onebit: NewState: world size %d < 1", worldSize)
	case n < 0:
		return nil, fmt.Errorf("onebit: NewState: negative length %d", n)
	case padded < n || padded%(8*worldSize) != 0:
		return nil, fmt.Errorf("%w: padded length %d for %d elements is not a multiple of 8*%d at least %[3]d",
			ErrSize, padded, n, worldSize)
	}
	chunk := padded / worldSize
	return &State{
		n: n, padded: padded, world: worldSize,
		workerErr:  make([]float32, padded),
		serverErr:  make([]float32, chunk),
		sendBits:   make([]uint8, padded/8),
		recvBits:   make([]uint8, padded/8),
		serverAcc:  make([]float32, chunk),
		serverBits: make([]uint8, chunk/8),
		gathered:   make([]uint8, padded/8),
		scale:      make([]float32, 1),
		scales:     make([]float32, worldSize),
		sscales:    make([]float32, worldSize),
	}, nil
}

// Len returns the number of elements of the tensor (before padding).
func (s *State) Len() int { return s.n }

// PaddedLen returns the padded length, the size of the worker error.
func (s *State) PaddedLen() int { return s.padded }

// WorldSize returns the number of ranks the State was made for.
func (s *State) WorldSize() int { return s.world }

// WorkerError returns the worker error buffer (PaddedLen elements). It is
// the State's own memory: read it, or set it to restore a checkpoint.
func (s *State) WorkerError() []float32 { return s.workerErr }

// ServerError returns the server error of the chunk this rank owns
// (PaddedLen/WorldSize elements). It is the State's own memory.
func (s *State) ServerError() []float32 { return s.serverErr }

// Reset zeroes both error buffers, as DeepSpeed does when it loads a
// checkpoint or after a failed collective.
func (s *State) Reset() {
	clear(s.workerErr)
	clear(s.serverErr)
}

// SetKernel makes the State run its per-element steps with k; nil means
// HostKernel.
func (s *State) SetKernel(k Kernel) { s.kernel = k }

func (s *State) k() Kernel {
	if s.kernel == nil {
		return HostKernel{}
	}
	return s.kernel
}
