package algo_test

import (
	"bytes"
	"testing"

	"github.com/goccl/goccl/algo"
)

// Every range of a Vec, taken piece by piece, is the same bytes as that
// range of the pieces joined, and no piece it returns crosses a boundary.
func TestVecPiece(t *testing.T) {
	for _, lens := range [][]int{{}, {0}, {5}, {0, 5, 0}, {1, 2, 3}, {4, 0, 4, 1}, {3, 3, 3, 3}} {
		var parts [][]byte
		var joined []byte
		for i, n := range lens {
			b := bytes.Repeat([]byte{byte('a' + i)}, n)
			for j := range b {
				b[j] += byte(j) << 4
			}
			parts = append(parts, b)
			joined = append(joined, b...)
		}
		v := algo.Pieces(parts)
		if v.Len() != len(joined) {
			t.Fatalf("%v: Len %d, want %d", lens, v.Len(), len(joined))
		}
		for lo := 0; lo <= len(joined); lo++ {
			for hi := lo; hi <= len(joined); hi++ {
				var got []byte
				for off := lo; off < hi; {
					b := v.Piece(off, hi)
					if len(b) == 0 {
						t.Fatalf("%v: Piece(%d, %d) is empty", lens, off, hi)
					}
					for _, c := range b[1:] {
						if c&0xf != b[0]&0xf {
							t.Fatalf("%v: Piece(%d, %d) = %q crosses pieces", lens, off, hi, b)
						}
					}
					got = append(got, b...)
					off += len(b)
				}
				if !bytes.Equal(got, joined[lo:hi]) {
					t.Fatalf("%v [%d, %d): %q, want %q", lens, lo, hi, got, joined[lo:hi])
				}
			}
		}
	}
}

// A Vec's pieces are the caller's memory: writes through Piece land there.
func TestVecAliases(t *testing.T) {
	a, b := make([]byte, 3), make([]byte, 2)
	v := algo.Pieces([][]byte{a, b})
	copy(v.Piece(2, 5), "x")
	copy(v.Piece(3, 5), "yz")
	if string(a) != "\x00\x00x" || string(b) != "yz" {
		t.Fatalf("a = %q, b = %q", a, b)
	}
}
