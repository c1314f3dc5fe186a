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
	_ encoding.BinaryAppender    = (*Adam)(nil)
	_ encoding.BinaryMarshaler   = (*Adam)(nil)
	_ encoding.BinaryUnmarshaler = (*Adam)(nil)
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

const (
	adamMagic   = "goccl-1a"
	adamVersion = 1
)

// AppendBinary appends the optimizer's checkpoint to b (see MarshalBinary).
func (a *Adam) AppendBinary(b []byte) ([]byte, error) {
	le := binary.LittleEndian
	b = append(b, adamMagic...)
	b = le.AppendUint32(b, adamVersion)
	b = le.AppendUint64(b, uint64(a.step))
	b = le.AppendUint32(b, uint32(len(a.params)))
	for i := range a.params {
		b = le.AppendUint64(b, uint64(len(a.m[i])))
		for _, v := range a.m[i] {
			b = le.AppendUint32(b, math.Float32bits(v))
		}
		for _, v := range a.v[i] {
			b = le.AppendUint32(b, math.Float32bits(v))
		}
		at := len(b)
		b = le.AppendUint64(b, 0) // the State's length, filled in below
		var err error
		if b, err = a.states[i].AppendBinary(b); err != nil {
			return nil, fmt.Errorf("onebit: Adam.AppendBinary: parameter %d: %w", i, err)
		}
		le.PutUint64(b[at:], uint64(len(b)-at-8))
	}
	return b, nil
}

// MarshalBinary returns a checkpoint of the optimizer on this rank: the
// number of completed steps, the momentum and variance of every parameter
// and the State of every parameter (its compression errors, see
// State.MarshalBinary). The parameters themselves are the caller's to save,
// and the configuration is not saved. Each rank saves its own.
//
// The layout, little-endian: "goccl-1a", version uint32 (1), steps uint64,
// the number of parameters uint32, then for each parameter its length
// uint64, m and v as float32 bits, and its State's checkpoint preceded by
// its length in bytes, uint64.
func (a *Adam) MarshalBinary() ([]byte, error) {
	return a.AppendBinary(nil)
}

// UnmarshalBinary restores a checkpoint made by MarshalBinary into an
// optimizer made by NewAdam for as many parameters of the same lengths over
// a communicator of the same size (ErrSize otherwise). Restore the
// parameters too: the next Step then computes exactly what the
// uninterrupted run would have. On error the optimizer is unchanged.
func (a *Adam) UnmarshalBinary(data []byte) error {
	fail := func(err error) error { return fmt.Errorf("onebit: Adam.UnmarshalBinary: %w", err) }
	le := binary.LittleEndian
	const head = len(adamMagic) + 4 + 8 + 4
	if len(data) < head || string(data[:len(adamMagic)]) != adamMagic {
		return fail(fmt.Errorf("%w: bad header", errAdamCheckpoint))
	}
	d := data[len(adamMagic):]
	if v := le.Uint32(d); v != adamVersion {
		return fail(fmt.Errorf("%w: version %d, want %d", errAdamCheckpoint, v, adamVersion))
	}
	step, np := le.Uint64(d[4:]), uint64(le.Uint32(d[12:]))
	if np != uint64(len(a.params)) {
		return fail(fmt.Errorf("%w: checkpoint of %d parameters, optimizer of %d", ErrSize, np, len(a.params)))
	}
	if step > math.MaxInt64 {
		return fail(fmt.Errorf("%w: step %d", errAdamCheckpoint, step))
	}
	d = data[head:]
	// Parse and check everything before changing anything.
	ms, vs := make([][]float32, np), make([][]float32, np)
	states := make([]*State, np)
	for i := range a.params {
		n := uint64(len(a.m[i]))
		if len(d) < 8 {
			return fail(fmt.Errorf("%w: parameter %d truncated", errAdamCheckpoint, i))
		}
		if got := le.Uint64(d); got != n {
			return fail(fmt.Errorf("%w: parameter %d has %d elements in the checkpoint, %d here", ErrSize, i, got, n))
		}
		d = d[8:]
		if uint64(len(d)) < 8*n+8 {
			return fail(fmt.Errorf("%w: parameter %d truncated", errAdamCheckpoint, i))
		}
		ms[i], vs[i] = make([]float32, n), make([]float32, n)
		for j := range ms[i] {
			ms[i][j] = math.Float32frombits(le.Uint32(d[4*j:]))
			vs[i][j] = math.Float32frombits(le.Uint32(d[4*(int(n)+j):]))
		}
		d = d[8*n:]
		sl := le.Uint64(d)
		d = d[8:]
		if sl > uint64(len(d)) {
			return fail(fmt.Errorf("%w: parameter %d: State truncated", errAdamCheckpoint, i))
		}
		st, _ := NewStatePadded(a.states[i].n, a.states[i].world, a.states[i].padded)
		if err := st.UnmarshalBinary(d[:sl]); err != nil {
			return fail(fmt.Errorf("parameter %d: %w", i, err))
		}
		states[i] = st
		d = d[sl:]
	}
	if len(d) != 0 {
		return fail(fmt.Errorf("%w: %d trailing bytes", errAdamCheckpoint, len(d)))
	}
	for i := range a.params {
		copy(a.m[i], ms[i])
		copy(a.v[i], vs[i])
		states[i].kernel = a.states[i].kernel
		a.states[i] = states[i]
	}
	a.step = int(step)
	return nil
}

// errAdamCheckpoint is wrapped by the errors of Adam.UnmarshalBinary for
// data that is not a checkpoint of an Adam.
var errAdamCheckpoint = errors.New("not a onebit Adam checkpoint")
