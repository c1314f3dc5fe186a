package onebit

import "math"

// Kernel computes the per-element steps of the compressed allreduce. The
// Go implementation is HostKernel; device code supplies its own so that the
// same steps run where the bytes live. The doc comment of each method gives
// the plain Go loop it must compute, with sign(i) meaning
//
//	!(err[i] < 0)                         // when packing: +0, -0 and NaN are positive
//	bits[i/8]>>(7-i%8)&1 == 1             // when reading packed bits
//
// Bits are packed most significant bit first, as numpy.packbits does.
// Arithmetic is float32 throughout except for the sum of squares, which is
// accumulated in float64. Implementations may sum in any order.
type Kernel interface {
	// CompensateNorm adds x into the error buffer err, in place, and returns
	// the sum of squares of the whole of err. x may be shorter than err (the
	// rest counts as zero padding):
	//
	//	for i := range x { err[i] += x[i] }
	//	for i := range err { ss += float64(err[i]) * float64(err[i]) }
	//	return ss
	CompensateNorm(err, x []float32) float64

	// PackUpdate packs the signs of err into bits and turns err into the
	// compression error err - scale*(±1). bits must hold PackedLen(len(err))
	// bytes:
	//
	//	for i := range err {
	//		if !(err[i] < 0) {
	//			bits[i/8] |= 1 << (7 - i%8) // bits zeroed first
	//			err[i] -= scale
	//		} else {
	//			err[i] -= -scale
	//		}
	//	}
	PackUpdate(bits []uint8, err []float32, scale float32)

	// AccumulateSigns adds ±scale into dst from the packed bits:
	//
	//	for i := range dst {
	//		if bits[i/8]>>(7-i%8)&1 == 1 { dst[i] += scale } else { dst[i] += -scale }
	//	}
	AccumulateSigns(dst []float32, bits []uint8, scale float32)

	// Decompress writes ±scale into dst from the packed bits:
	//
	//	for i := range dst {
	//		if bits[i/8]>>(7-i%8)&1 == 1 { dst[i] = scale } else { dst[i] = -scale }
	//	}
	Decompress(dst []float32, bits []uint8, scale float32)
}

// HostKernel is the pure-Go Kernel for buffers in host memory. Its loops are
// branch-free on the sign so that random signs cost no mispredictions.
type HostKernel struct{}

var _ Kernel = HostKernel{}

// CompensateNorm implements Kernel.
func (HostKernel) CompensateNorm(err, x []float32) float64 {
	if len(x) > len(err) {
		panic("onebit: CompensateNorm: x longer than err")
	}
	var s0, s1, s2, s3 float64
	e := err[:len(x)]
	i := 0
	for ; i+4 <= len(e); i += 4 {
		ee := e[i : i+4 : i+4]
		xx := x[i : i+4 : i+4]
		a, b, c, d := ee[0]+xx[0], ee[1]+xx[1], ee[2]+xx[2], ee[3]+xx[3]
		ee[0], ee[1], ee[2], ee[3] = a, b, c, d
		s0 += float64(a) * float64(a)
		s1 += float64(b) * float64(b)
		s2 += float64(c) * float64(c)
		s3 += float64(d) * float64(d)
	}
	for ; i < len(e); i++ {
		a := e[i] + x[i]
		e[i] = a
		s0 += float64(a) * float64(a)
	}
	// The padding part: nothing to add, only the squares.
	for ; i+4 <= len(err); i += 4 {
		ee := err[i : i+4 : i+4]
		s0 += float64(ee[0]) * float64(ee[0])
		s1 += float64(ee[1]) * float64(ee[1])
		s2 += float64(ee[2]) * float64(ee[2])
		s3 += float64(ee[3]) * float64(ee[3])
	}
	for ; i < len(err); i++ {
		s0 += float64(err[i]) * float64(err[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// signed returns scale when bit is 1 and -scale when it is 0, without a branch.
func signed(scaleBits, bit uint32) float32 {
	return math.Float32frombits(scaleBits ^ (bit^1)<<31)
}

// PackUpdate implements Kernel.
func (HostKernel) PackUpdate(bits []uint8, err []float32, scale float32) {
	if len(bits) < PackedLen(len(err)) {
		panic("onebit: PackUpdate: bits too short")
	}
	sb := math.Float32bits(scale)
	full := len(err) / 8
	if littleEndian {
		packUpdateWords(bits, err, scale)
	}
	for k := 0; k < full && !littleEndian; k++ {
		e := err[8*k : 8*k+8 : 8*k+8]
		p0, p1, p2, p3 := posBit(e[0]), posBit(e[1]), posBit(e[2]), posBit(e[3])
		p4, p5, p6, p7 := posBit(e[4]), posBit(e[5]), posBit(e[6]), posBit(e[7])
		bits[k] = uint8(p0<<7 | p1<<6 | p2<<5 | p3<<4 | p4<<3 | p5<<2 | p6<<1 | p7)
		e[0] -= signed(sb, p0)
		e[1] -= signed(sb, p1)
		e[2] -= signed(sb, p2)
		e[3] -= signed(sb, p3)
		e[4] -= signed(sb, p4)
		e[5] -= signed(sb, p5)
		e[6] -= signed(sb, p6)
		e[7] -= signed(sb, p7)
	}
	if rest := err[8*full:]; len(rest) > 0 {
		var b uint32
		for j := range rest {
			p := posBit(rest[j])
			b |= p << (7 - j)
			rest[j] -= signed(sb, p)
		}
		bits[full] = uint8(b)
	}
}

// AccumulateSigns implements Kernel.
func (HostKernel) AccumulateSigns(dst []float32, bits []uint8, scale float32) {
	if len(bits) < PackedLen(len(dst)) {
		panic("onebit: AccumulateSigns: bits too short")
	}
	sb := math.Float32bits(scale)
	full := len(dst) / 8
	for k := 0; k < full; k++ {
		d := dst[8*k : 8*k+8 : 8*k+8]
		b := uint32(bits[k])
		d[0] += signed(sb, b>>7&1)
		d[1] += signed(sb, b>>6&1)
		d[2] += signed(sb, b>>5&1)
		d[3] += signed(sb, b>>4&1)
		d[4] += signed(sb, b>>3&1)
		d[5] += signed(sb, b>>2&1)
		d[6] += signed(sb, b>>1&1)
		d[7] += signed(sb, b&1)
	}
	for j := 8 * full; j < len(dst); j++ {
		dst[j] += signed(sb, uint32(bits[full])>>(7-j%8)&1)
	}
}

// Decompress implements Kernel.
func (HostKernel) Decompress(dst []float32, bits []uint8, scale float32) {
	if len(bits) < PackedLen(len(dst)) {
		panic("onebit: Decompress: bits too short")
	}
	sb := math.Float32bits(scale)
	full := len(dst) / 8
	for k := 0; k < full; k++ {
		d := dst[8*k : 8*k+8 : 8*k+8]
		b := uint32(bits[k])
		d[0] = signed(sb, b>>7&1)
		d[1] = signed(sb, b>>6&1)
		d[2] = signed(sb, b>>5&1)
		d[3] = signed(sb, b>>4&1)
		d[4] = signed(sb, b>>3&1)
		d[5] = signed(sb, b>>2&1)
		d[6] = signed(sb, b>>1&1)
		d[7] = signed(sb, b&1)
	}
	for j := 8 * full; j < len(dst); j++ {
		dst[j] = signed(sb, uint32(bits[full])>>(7-j%8)&1)
	}
}
