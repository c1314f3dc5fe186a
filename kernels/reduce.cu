// reduce.cu: dst[i] = dst[i] op src[i], one kernel per (dtype, op), named
// goccl_reduce_<dtype>_<op> (dtype: f32 f64 f16 bf16 i8 u8 i32 i64; op: sum
// prod min max, and band bor bxor for the integers). reduceop.Avg uses the sum
// kernel and then scale.cu. Each kernel takes (dst, src, n) with n counted in
// elements, and is launched with GOCCL_BLOCK threads per block and any grid.
//
// The arithmetic is reduceop's, element by element:
//   - integers wrap (two's complement), as Go's + and * do;
//   - floats use IEEE round-to-nearest-even, no fused multiply-add
//     (gen.sh passes -ffp-contract=off), no flush to zero;
//   - min and max are Go's built-in min and max: a NaN in either operand
//     gives NaN, and min(-0, +0) = -0, max(-0, +0) = +0.
#include "dtypes.cuh"

// Arithmetic on the unsigned twin of an integer type wraps without undefined
// behaviour; floats map to themselves.
template <class T> struct Wrap { typedef T U; };
template <> struct Wrap<i8> { typedef u8 U; };
template <> struct Wrap<i32> { typedef u32 U; };
template <> struct Wrap<i64> { typedef u64 U; };

static __device__ __forceinline__ bool neg_bit(float x) { return (float_bits(x) >> 31) != 0; }
static __device__ __forceinline__ bool neg_bit(double x) { return (double_bits(x) >> 63) != 0; }

struct OpSum {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    typedef typename Wrap<T>::U U;
    return (T)(U)((U)a + (U)b);
  }
};
struct OpProd {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    typedef typename Wrap<T>::U U;
    return (T)(U)((U)a * (U)b);
  }
};
struct OpMin {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    return b < a ? b : a;
  }
  __device__ __forceinline__ float operator()(float a, float b) const { return gomin(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return gomin(a, b); }
  template <class T> static __device__ __forceinline__ T gomin(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    if (a < b) return a;
    if (b < a) return b;
    return neg_bit(a) ? a : b; // equal: only -0 and +0 differ
  }
};
struct OpMax {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    return b > a ? b : a;
  }
  __device__ __forceinline__ float operator()(float a, float b) const { return gomax(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return gomax(a, b); }
  template <class T> static __device__ __forceinline__ T gomax(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    if (a > b) return a;
    if (b > a) return b;
    return neg_bit(a) ? b : a; // equal: only -0 and +0 differ
  }
};
struct OpBAnd {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return (T)(a & b); }
};
struct OpBOr {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return (T)(a | b); }
};
struct OpBXor {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return (T)(a ^ b); }
};

#define GOCCL_REDUCE(dt, op, D, OP)                                          \
  extern "C" __global__ void __launch_bounds__(GOCCL_BLOCK)                 \
      goccl_reduce_##dt##_##op(D::S *__restrict__ dst,                       \
                               const D::S *__restrict__ src, u64 n) {        \
    apply2<D>(dst, src, n, OP());                                            \
  }

#define GOCCL_REDUCE_ARITH(dt, D)                                            \
  GOCCL_REDUCE(dt, sum, D, OpSum)                                            \
  GOCCL_REDUCE(dt, prod, D, OpProd)                                          \
  GOCCL_REDUCE(dt, min, D, OpMin)                                            \
  GOCCL_REDUCE(dt, max, D, OpMax)

#define GOCCL_REDUCE_INT(dt, D)                                              \
  GOCCL_REDUCE_ARITH(dt, D)                                                  \
  GOCCL_REDUCE(dt, band, D, OpBAnd)                                          \
  GOCCL_REDUCE(dt, bor, D, OpBOr)                                            \
  GOCCL_REDUCE(dt, bxor, D, OpBXor)

GOCCL_REDUCE_ARITH(f32, DF32)
GOCCL_REDUCE_ARITH(f64, DF64)
GOCCL_REDUCE_ARITH(f16, DF16)
GOCCL_REDUCE_ARITH(bf16, DBF16)
GOCCL_REDUCE_INT(i8, DI8)
GOCCL_REDUCE_INT(u8, DU8)
GOCCL_REDUCE_INT(i32, DI32)
GOCCL_REDUCE_INT(i64, DI64)
