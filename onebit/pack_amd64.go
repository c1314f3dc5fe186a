//go:build amd64 && !purego

package onebit

import "golang.org/x/sys/cpu"

// haveAVX says whether packAVX can run: it needs AVX's 8-wide compare and
// movemask.
var haveAVX = cpu.X86.HasAVX

// packAVX packs n bytes' worth of signs (8n float32 of src) into dst with
// AVX: per 8 floats one vcmpps against zero (x < 0 is false for +0, -0 and
// NaN, as DeepSpeed's rule wants), one vmovmskps, and packTable to put
// element 0 in the most significant bit and make 1 mean "not negative".
// It is Pack's loop over whole bytes:
//
//	for k := range n { dst[k] = bits(src[8k]) << 7 | ... | bits(src[8k+7]) }
//
//go:noescape
func packAVX(dst *uint8, src *float32, n int)
