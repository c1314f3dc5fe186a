package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/goccl/goccl/reduceop"
)

// P2PHeaderLen is the length of a point-to-point header.
const P2PHeaderLen = 16

// P2PHeader says what a Send sent: its dtype and element count, so that a
// Recv of another dtype or length fails naming both.
type P2PHeader [P2PHeaderLen]byte

// NewP2PHeader returns the header of a message of count elements of dt.
func NewP2PHeader(dt reduceop.DType, count int) (h P2PHeader) {
	h[0], h[1], h[2] = 'G', 'P', uint8(dt)
	binary.LittleEndian.PutUint64(h[8:], uint64(count))
	return h
}

// Parse returns the header's dtype and count, and false for bytes that
// are no header.
func (h P2PHeader) Parse() (dt reduceop.DType, count int64, ok bool) {
	if h[0] != 'G' || h[1] != 'P' {
		return 0, 0, false
	}
	return reduceop.DType(h[2]), int64(binary.LittleEndian.Uint64(h[8:])), true
}

func (h P2PHeader) String() string {
	dt, count, ok := h.Parse()
	if !ok {
		return "a message without a point-to-point header"
	}
	return fmt.Sprintf("dtype=%v, count=%d", dt, count)
}
