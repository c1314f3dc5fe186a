// Package reduceop implements the element types and reductions of goccl's
// collectives: what AllReduce, Reduce and ReduceScatter do to the bytes two
// ranks hold at the same offset.
//
// # Types and ops
//
// A DType names an element type and an Op a reduction. The dtypes are the
// floats Float32, Float64, Float16 and BFloat16; the integers Int8, Uint8,
// Int16, Uint16, Int32, Uint32, Int64 and Uint64; Bool; and Complex64 and
// Complex128. Every reduction is element-wise and in place,
// dst[i] = dst[i] op src[i]:
//
//	Sum   dst[i] + src[i]                 floats, integers, complex
//	Prod  dst[i] * src[i]                 floats, integers, complex
//	Min   min(dst[i], src[i])             floats, integers; bool: and
//	Max   max(dst[i], src[i])             floats, integers; bool: or
//	Avg   Sum, then Scale by the group    floats, complex
//	      size once, at the end
//	BAnd  dst[i] & src[i]                 integers; bool: and
//	BOr   dst[i] | src[i]                 integers; bool: or
//	BXor  dst[i] ^ src[i]                 integers; bool: xor
//
// An op a dtype cannot take is an error wrapping ErrUnsupported (see
// Check), never a silent cast: Avg on integers, bitwise ops on floats,
// Min, Max and bitwise ops on complex, and Sum, Prod and Avg on Bool (a
// sum of bools would be a count, which a bool cannot hold; BOr and Max say
// "or" without ambiguity).
//
// # Entry points
//
// Apply and Scale work on raw byte buffers as a transport delivers them:
// the elements in the machine's native little-endian layout, viewed in
// place without copying. Host is the Kernel built on them; device code
// (package device/cuda) implements Kernel so that reductions run where the
// bytes live, and collectives take whichever Kernel owns the buffer.
//
// Go callers with typed slices use the generic functions SumInto,
// ProdInto, MinInto, MaxInto, BAndInto, BOrInto, BXorInto and ScaleSlice
// (the names Sum, Prod, ... are the Op constants), or Reduce, which takes
// the Op as an argument. Their constraints are Element (every element
// type), Scalar (those with Sum and Prod), Number (the real ones, with Min
// and Max), Float, Integer, Complex and Logical (the integers and bool,
// with BAnd, BOr and BXor).
//
// # Semantics
//
// Floating-point results are the IEEE 754 results, rounded to nearest even.
// Min and Max follow Go's builtin min and max: if either operand is NaN the
// result is NaN (NaN propagates, as in torch.minimum, not as in C's fmin),
// and -0 is smaller than +0. Sum of +Inf and -Inf is NaN. Collective
// results on floats depend on the order in which ranks' contributions are
// added; each algorithm documents its order.
//
// Integer Sum and Prod wrap around on overflow (two's complement, modulo
// 2^bits), as Go's + and * do, and as C and torch do; Min and Max compare
// as signed for Int8, Int16, Int32 and Int64 and unsigned for Uint8,
// Uint16, Uint32 and Uint64.
//
// A Bool is one byte, 0 (false) or 1 (true). The reductions treat any
// nonzero byte as true, since a byte from a peer is whatever the peer sent,
// and write only 0 or 1.
//
// Complex Sum adds the real and the imaginary parts; Prod is Go's complex
// multiplication, (a+bi)(c+di) = (ac-bd) + (ad+bc)i, which for Complex64
// computes in float64 and rounds each part once; Avg's Scale divides each
// part by n, complex(real(x)/n, imag(x)/n), which is exact scaling (Go's
// x / complex(n, 0) is not: it turns a -0 part into +0).
//
// # Float16 and BFloat16
//
// F16 (IEEE binary16) and BF16 (bfloat16) are uint16-backed Go types
// holding the bit pattern. F16FromFloat32 and BF16FromFloat32 round to
// nearest even and handle NaN, ±Inf, overflow and subnormals; Float32
// converts back exactly. Reductions on them widen both operands to float32,
// compute there and round once per element. Because float32 carries more
// than twice the precision of either format plus two bits, that single
// rounding gives the correctly rounded result of Sum, Prod and Scale in the
// narrow format, the same answer an exact computation would give.
//
// # Speed
//
// The loops are typed generic functions, one source per op, instantiated
// per element type and unrolled by 8 with the bounds checks proven away; a
// call dispatches once on DType and Op, never per element. On amd64 with
// AVX, float32 and float64 Sum (and Avg's sum, and complex Sum, which is
// the float sum of the parts) use a small assembly kernel;
// building with the purego tag, or a CPU without AVX, leaves only the Go
// loops, which the tests also run and compare against it. BenchmarkCopy64MiB
// and BenchmarkSumFloat32_64MiB put Sum beside Go's copy on the same
// machine, counting 2 reads and 1 write for Sum and 1 read and 1 write for
// copy:
//
//	go test -run x -bench . -benchtime 20x ./reduceop
package reduceop
