package algotest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// SumInt64 is a ReduceFunc for little-endian int64 sums.
func SumInt64(dst, src []byte) error {
	if len(dst) != len(src) || len(dst)%8 != 0 {
		return fmt.Errorf("algotest: SumInt64 of %d and %d bytes", len(dst), len(src))
	}
	for i := 0; i < len(dst); i += 8 {
		v := int64(binary.LittleEndian.Uint64(dst[i:])) + int64(binary.LittleEndian.Uint64(src[i:]))
		binary.LittleEndian.PutUint64(dst[i:], uint64(v))
	}
	return nil
}

// SumFloat64 is a ReduceFunc for little-endian float64 sums.
func SumFloat64(dst, src []byte) error {
	if len(dst) != len(src) || len(dst)%8 != 0 {
		return fmt.Errorf("algotest: SumFloat64 of %d and %d bytes", len(dst), len(src))
	}
	for i := 0; i < len(dst); i += 8 {
		v := math.Float64frombits(binary.LittleEndian.Uint64(dst[i:])) + math.Float64frombits(binary.LittleEndian.Uint64(src[i:]))
		binary.LittleEndian.PutUint64(dst[i:], math.Float64bits(v))
	}
	return nil
}

// Int64Bytes encodes v little-endian.
func Int64Bytes(v []int64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

// Int64s decodes little-endian int64s.
func Int64s(b []byte) []int64 {
	v := make([]int64, len(b)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return v
}

// Float64Bytes encodes v little-endian.
func Float64Bytes(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

// Float64s decodes little-endian float64s.
func Float64s(b []byte) []float64 {
	v := make([]float64, len(b)/8)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return v
}

// GuardLen is the number of guard bytes on each side of a Guarded buffer.
const GuardLen = 24

const guardByte = 0xA5

// Guarded is a buffer with guard bands on both sides that code under test
// must leave untouched.
type Guarded struct {
	all []byte
}

// NewGuarded returns a guarded buffer holding a copy of b.
func NewGuarded(b []byte) *Guarded {
	all := make([]byte, len(b)+2*GuardLen)
	for i := range all {
		all[i] = guardByte
	}
	copy(all[GuardLen:], b)
	return &Guarded{all: all}
}

// Buf returns the buffer between the guards, with its capacity limited to
// its length so that an append cannot spill into the guard.
func (g *Guarded) Buf() []byte {
	return g.all[GuardLen : len(g.all)-GuardLen : len(g.all)-GuardLen]
}

// Check reports an error if a guard byte changed.
func (g *Guarded) Check() error {
	want := bytes.Repeat([]byte{guardByte}, GuardLen)
	if !bytes.Equal(g.all[:GuardLen], want) {
		return fmt.Errorf("algotest: guard before the buffer overwritten: % x", g.all[:GuardLen])
	}
	if !bytes.Equal(g.all[len(g.all)-GuardLen:], want) {
		return fmt.Errorf("algotest: guard after the buffer overwritten: % x", g.all[len(g.all)-GuardLen:])
	}
	return nil
}
