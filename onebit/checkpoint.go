package onebit

import (
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

var (
	_ encoding.BinaryAppender    = (*State)(nil)
	_ encoding.BinaryMarshaler   = (*State)(nil)
	_ encoding.BinaryUnmarshaler = (*State)(nil)
)

// stateMagic starts every saved State; the byte after it is the version.
const (
	stateMagic   = "goccl-1b"
	stateVersion = 1
	stateHeader  = len(stateMagic) + 4 + 8 + 4 + 8 + 4

	// maxWorld bounds the world size a checkpoint may name, far above any
	// data-parallel job, so that a corrupt header cannot make
	// UnmarshalBinary allocate gigabytes of per-rank scales.
	maxWorld = 1 << 20
)

// AppendBinary appends the State's checkpoint to b (see MarshalBinary).
func (s *State) AppendBinary(b []byte) ([]byte, error) {
	b = slices.Grow(b, stateHeader+4*(len(s.workerErr)+len(s.serverErr)))
	b = append(b, stateMagic...)
	b = binary.LittleEndian.AppendUint32(b, stateVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.n))
	b = binary.LittleEndian.AppendUint32(b, uint32(s.world))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.padded))
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(s.rank)))
	for _, v := range s.workerErr {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	for _, v := range s.serverErr {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b, nil
}

// MarshalBinary returns a checkpoint of the State: what the next step needs
// from it, that is the sizes, the rank whose errors it holds and both error
// buffers, bit for bit. The scales and signs of the last step are not saved
// (the next step does not read them). Each rank saves its own State: the
// errors differ from rank to rank. Unlike DeepSpeed's OnebitAdam, which
// drops the errors when it loads a checkpoint, restoring them makes the
// resumed run compute exactly what the uninterrupted one would have.
//
// The layout, little-endian: "goccl-1b", version uint32 (1), Len uint64,
// WorldSize uint32, PaddedLen uint64, rank int32 (-1 for none), then the
// worker error and the server error as float32 bits.
func (s *State) MarshalBinary() ([]byte, error) {
	return s.AppendBinary(nil)
}

// errCheckpoint is wrapped by the errors of UnmarshalBinary for data that is
// not a checkpoint of a State.
var errCheckpoint = errors.New("not a onebit State checkpoint")

// UnmarshalBinary restores a checkpoint made by MarshalBinary. A State made
// by NewState or NewStatePadded must have the checkpoint's Len, WorldSize
// and PaddedLen (ErrSize otherwise); a zero State (new(State)) takes them
// from the checkpoint (at most 1<<20 ranks). The kernel set by SetKernel is
// kept. The restored
// State holds the errors of the checkpoint's rank and has no last step. On
// error the State is unchanged.
func (s *State) UnmarshalBinary(data []byte) error {
	h, err := parseHeader(data)
	if err != nil {
		return fmt.Errorf("onebit: State.UnmarshalBinary: %w", err)
	}
	dst := s
	if s.world == 0 { // a zero State: take the sizes from the checkpoint
		ns, err := NewStatePadded(h.n, h.world, h.padded)
		if err != nil {
			return fmt.Errorf("onebit: State.UnmarshalBinary: %w", err)
		}
		dst = ns
	} else if h.n != s.n || h.world != s.world || h.padded != s.padded {
		return fmt.Errorf("%w: State.UnmarshalBinary: checkpoint of %d elements padded to %d over %d ranks, State of %d padded to %d over %d",
			ErrSize, h.n, h.padded, h.world, s.n, s.padded, s.world)
	}
	body := data[stateHeader:]
	for i := range dst.workerErr {
		dst.workerErr[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:]))
	}
	body = body[4*len(dst.workerErr):]
	for i := range dst.serverErr {
		dst.serverErr[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:]))
	}
	dst.rank, dst.last = h.rank, false
	if dst != s {
		k := s.kernel
		*s = *dst
		s.kernel = k
	}
	return nil
}

type stateHead struct{ n, world, padded, rank int }

// parseHeader checks everything about a checkpoint but the values of the
// errors, before the State is touched.
func parseHeader(data []byte) (stateHead, error) {
	if len(data) < stateHeader || string(data[:len(stateMagic)]) != stateMagic {
		return stateHead{}, fmt.Errorf("%w: bad header", errCheckpoint)
	}
	le := binary.LittleEndian
	d := data[len(stateMagic):]
	if v := le.Uint32(d); v != stateVersion {
		return stateHead{}, fmt.Errorf("%w: version %d, want %d", errCheckpoint, v, stateVersion)
	}
	n, world, padded := le.Uint64(d[4:]), uint64(le.Uint32(d[12:])), le.Uint64(d[16:])
	rank := int64(int32(le.Uint32(d[24:])))
	body := uint64(len(data) - stateHeader)
	switch {
	case world == 0 || world > maxWorld || padded%(8*world) != 0 || n > padded:
		return stateHead{}, fmt.Errorf("%w: %d elements padded to %d over %d ranks", errCheckpoint, n, padded, world)
	case padded > body || 4*(padded+padded/world) != body:
		return stateHead{}, fmt.Errorf("%w: %d bytes of errors for %d elements padded to %d over %d ranks",
			errCheckpoint, body, n, padded, world)
	case rank < -1 || rank >= int64(world):
		return stateHead{}, fmt.Errorf("%w: rank %d of %d", errCheckpoint, rank, world)
	}
	return stateHead{n: int(n), world: int(world), padded: int(padded), rank: int(rank)}, nil
}
