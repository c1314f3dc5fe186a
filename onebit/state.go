package onebit

import (
	"errors"
	"fmt"
)

// State is the error-feedback state of one tensor: the worker error (one
// value per padded element) and the server error (one value per element of
// the chunk this rank owns), plus the scratch buffers one compressed
// allreduce needs, allocated once. Keep one State per tensor and pass it to
// every CompressedAllReduce of that tensor, on the same rank. A State is not
// safe for concurrent use.
//
// Besides the errors, a State keeps the scales and packed signs of its last
// step, which WorkerScale, WorkerScales, ServerScale, ServerScales,
// WorkerSigns and ServerSigns return as copies. They describe the last
// successful CompressedAllReduce; a new State, one whose last call failed
// (after its checks passed), a Reset State and a State restored with
// UnmarshalBinary have no last step, and those methods say so (ok false, nil
// slices). A State that holds a rank's errors refuses a communicator of
// another rank (ErrSize) until it is Reset.
//
// For a checkpoint, MarshalBinary saves the errors and UnmarshalBinary
// restores them, into a State made by NewState or into a zero State; the
// next step then computes exactly what it would have computed without the
// interruption.
type State struct {
	n, padded, world int

	// rank is the rank whose server error the State holds, -1 while the
	// errors belong to no rank (a new or Reset State).
	rank int
	// last reports that the scales and signs below are those of the last
	// step, which succeeded.
	last bool

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

// PaddedLen returns the length a buffer of n elements is zero-padded to for
// CompressedAllReduce over worldSize ranks (at least 1) by default, that is
// by NewState: the smallest multiple of 8*worldSize that is at least n.
//
// Two rules exist in DeepSpeed, and they differ only when worldSize does not
// divide 8:
//
//   - PaddedLen, a multiple of 8p. DeepSpeed's compressed_allreduce (in the
//     NCCL, MPI, HCCL and compressed backends alike) has no rule of its own: it
//     pads the buffer to the length of the worker error its caller
//     allocated, and needs that length to be a multiple of 8p so that the
//     packed signs split into p whole-byte chunks. Its backend tests
//     allocate the worker error at this length.
//   - PaddedLenAdam, a multiple of p*lcm(p, 8). OnebitAdam (and 0/1 Adam and
//     1-bit LAMB) allocate the worker error at this length.
//
// goccl uses PaddedLen by default because it is the least padding the
// algorithm needs: fewer zeros compressed and sent (for 12 ranks, 96
// elements of alignment instead of 288). Adam uses PaddedLenAdam so that its
// numbers are OnebitAdam's: the worker scale divides by the square root of
// the padded length, so the two rules give different scales for the same
// input. Pass PaddedLenAdam to NewStatePadded to reproduce OnebitAdam's
// communication with CompressedAllReduce.
func PaddedLen(n, worldSize int) int {
	return roundUp(n, 8*worldSize)
}

// PaddedLenAdam returns the length DeepSpeed's OnebitAdam pads a tensor of n
// elements to when the world has worldSize ranks (at least 1): the smallest
// multiple of worldSize*lcm(worldSize, 8) that is at least n, so that every
// rank's chunk is a multiple of both 8 and worldSize. It is never less than
// PaddedLen, equal to it for every n when worldSize divides 8, and larger
// for some n otherwise (for 3 ranks and 1 element, 72 against 24). See
// PaddedLen for which rule is used where.
func PaddedLenAdam(n, worldSize int) int {
	return roundUp(n, worldSize*lcm(worldSize, 8))
}

// roundUp returns the smallest multiple of m that is at least n >= 0.
func roundUp(n, m int) int {
	return (n + m - 1) / m * m
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
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
// numbers (the worker scale divides by its square root): pass
// PaddedLenAdam(n, worldSize) to compress as DeepSpeed's OnebitAdam does,
// which is what Adam uses; for 1, 2, 4 and 8 ranks that equals PaddedLen.
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
		n: n, padded: padded, world: worldSize, rank: -1,
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
// checkpoint or after a failed collective. The State then holds no rank's
// errors and has no last step.
func (s *State) Reset() {
	clear(s.workerErr)
	clear(s.serverErr)
	s.rank, s.last = -1, false
}

// The methods below read the last step. A State whose buffers live on a
// device offers the same methods, copying from the device: they return
// values, never the State's memory.

// WorkerScale returns the scale this rank compressed its input with in the
// last step, ||x + workerError||₂ / sqrt(PaddedLen) (DeepSpeed's
// worker_scale); ok is false when there is no last step.
func (s *State) WorkerScale() (scale float32, ok bool) {
	if !s.last {
		return 0, false
	}
	return s.scales[s.rank], true
}

// WorkerScales returns a copy of the worker scales of every rank in the last
// step, as phase 1 gathered them: element j is rank j's WorkerScale. It is
// the same on every rank; nil when there is no last step.
func (s *State) WorkerScales() []float32 {
	if !s.last {
		return nil
	}
	return append([]float32(nil), s.scales...)
}

// ServerScale returns the scale this rank compressed the chunk it owns with
// in the last step, ||acc + serverError||₂ / sqrt(PaddedLen/WorldSize)
// (DeepSpeed's server_scale); ok is false when there is no last step.
func (s *State) ServerScale() (scale float32, ok bool) {
	if !s.last {
		return 0, false
	}
	return s.sscales[s.rank], true
}

// ServerScales returns a copy of the server scales of the last step, as
// phase 2 gathered them: element j is the scale of chunk j, which rank j
// owns and compressed (rank j's ServerScale). It is the same on every rank,
// and with ServerSigns it is all the output is made of: element i of the
// output is ±ServerScales()[i/(PaddedLen/WorldSize)]. Nil when there is no
// last step.
func (s *State) ServerScales() []float32 {
	if !s.last {
		return nil
	}
	return append([]float32(nil), s.sscales...)
}

// WorkerSigns returns a copy of the signs this rank compressed its input to
// in the last step, packed (PackedLen(PaddedLen) bytes, most significant bit
// first, 1 for not negative); its chunk j, PaddedLen/WorldSize/8 bytes, went
// to rank j in phase 1. Other ranks' worker signs are not kept: a rank only
// receives their chunk of its own. Nil when there is no last step.
func (s *State) WorkerSigns() []uint8 {
	if !s.last {
		return nil
	}
	return append([]uint8(nil), s.sendBits...)
}

// ServerSigns returns a copy of the server signs of every chunk in the last
// step, as phase 2 gathered them, packed like WorkerSigns: chunk j is the
// signs rank j compressed its chunk to. It is the same on every rank. Nil
// when there is no last step.
func (s *State) ServerSigns() []uint8 {
	if !s.last {
		return nil
	}
	return append([]uint8(nil), s.gathered...)
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
