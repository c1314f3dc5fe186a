// dtypes.cuh: how each reduceop.DType is stored and computed on the device,
// and the element loop that reduce.cu and scale.cu share.
#ifndef GOCCL_DTYPES_CUH
#define GOCCL_DTYPES_CUH

// bfloat16 <-> float32 in integer arithmetic, so that sm_70 (no bf16
// conversion instruction) gets the same bits as sm_80+: widening is a shift,
// narrowing rounds to nearest even and keeps NaNs NaN (quiet bit set).
static __device__ __forceinline__ float bf16_to_float(u16 b) {
  return bits_float((u32)b << 16);
}

static __device__ __forceinline__ u16 float_to_bf16(float f) {
  u32 u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return (u16)((u >> 16) | 0x0040u);
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return (u16)(u >> 16);
}

// A dtype D has a storage type D::S (what the buffer holds), a compute type
// D::C (what arithmetic runs in) and the two conversions. Float16 and
// BFloat16 compute in float32 and round back to nearest even once per
// element, as reduceop does on the host.
struct DF32 {
  typedef float S;
  typedef float C;
  static __device__ __forceinline__ C load(S x) { return x; }
  static __device__ __forceinline__ S store(C x) { return x; }
};
struct DF64 {
  typedef double S;
  typedef double C;
  static __device__ __forceinline__ C load(S x) { return x; }
  static __device__ __forceinline__ S store(C x) { return x; }
};
struct DF16 {
  typedef u16 S;
  typedef float C;
  static __device__ __forceinline__ C load(S x) { return half_to_float(x); }
  static __device__ __forceinline__ S store(C x) { return float_to_half(x); }
};
struct DBF16 {
  typedef u16 S;
  typedef float C;
  static __device__ __forceinline__ C load(S x) { return bf16_to_float(x); }
  static __device__ __forceinline__ S store(C x) { return float_to_bf16(x); }
};
template <class T> struct DInt {
  typedef T S;
  typedef T C;
  static __device__ __forceinline__ C load(S x) { return x; }
  static __device__ __forceinline__ S store(C x) { return x; }
};
typedef DInt<i8> DI8;
typedef DInt<u8> DU8;
typedef DInt<i32> DI32;
typedef DInt<i64> DI64;

// Element k of a 16-byte vector, and back. Going through the 32-bit words
// (not a union of v16 and S[16/sizeof(S)]) keeps the load and store 16 bytes
// wide: LLVM would otherwise split a union of 1- or 2-byte elements into
// 4- or 8-byte vector loads.
static __device__ __forceinline__ u32 word(const v16 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
static __device__ __forceinline__ void set_word(v16 &v, int i, u32 w) {
  if (i == 0) v.x = w;
  else if (i == 1) v.y = w;
  else if (i == 2) v.z = w;
  else v.w = w;
}
static __device__ __forceinline__ void from_bits(u64 b, float &x) { x = bits_float((u32)b); }
static __device__ __forceinline__ void from_bits(u64 b, double &x) { x = bits_double(b); }
template <class S> static __device__ __forceinline__ void from_bits(u64 b, S &x) { x = (S)b; }
static __device__ __forceinline__ u64 to_bits(float x) { return float_bits(x); }
static __device__ __forceinline__ u64 to_bits(double x) { return double_bits(x); }
template <class S> static __device__ __forceinline__ u64 to_bits(S x) {
  return (u64)x & (sizeof(S) == 8 ? ~0ull : (1ull << (8 * sizeof(S))) - 1);
}

// v16w is a 16-byte vector of two 64-bit words, for 8-byte elements (LLVM
// splits a v16 read as 64-bit halves into narrower loads).
struct __attribute__((aligned(16))) v16w {
  u64 x, y;
};

// Vec<S> is the 16-byte vector type whose lanes hold elements of type S.
template <class S, int Size = sizeof(S)> struct Vec {
  typedef v16 T;
  static __device__ __forceinline__ S lane(const v16 &v, int k) {
    const int per = 4 / sizeof(S), bits = 8 * sizeof(S);
    S x;
    from_bits(word(v, k / per) >> (bits * (k % per)), x);
    return x;
  }
  static __device__ __forceinline__ void set_lane(v16 &v, int k, S x) {
    const int per = 4 / sizeof(S), bits = 8 * sizeof(S);
    const int w = k / per, sh = bits * (k % per);
    const u32 mask = (bits == 32 ? 0xffffffffu : ((1u << bits) - 1)) << sh;
    set_word(v, w, (word(v, w) & ~mask) | (((u32)to_bits(x) << sh) & mask));
  }
};
template <class S> struct Vec<S, 8> {
  typedef v16w T;
  static __device__ __forceinline__ S lane(const v16w &v, int k) {
    S x;
    from_bits(k == 0 ? v.x : v.y, x);
    return x;
  }
  static __device__ __forceinline__ void set_lane(v16w &v, int k, S x) {
    if (k == 0) v.x = to_bits(x);
    else v.y = to_bits(x);
  }
};

// Splitting [0, n) for the vector loops: the head is the elements before
// the buffer's first 16-byte boundary, the body the whole 16-byte vectors
// after it, the tail what is left. head_elems returns the head's length, or
// n (no body) when p is not a whole number of elements past a 16-byte
// boundary (a misaligned element pointer, which only the scalar loop can
// take).
template <class S>
static __device__ __forceinline__ u64 head_elems(const void *p, u64 n) {
  const u64 mis = (u64)p & 15;
  if (mis % sizeof(S) != 0) return n;
  const u64 h = ((16 - mis) & 15) / sizeof(S);
  return h < n ? h : n;
}

// rest_index maps the j-th element that the scalar loop handles (head
// first, then tail) to its index: the body, [head, head+body), is skipped.
static __device__ __forceinline__ u64 rest_index(u64 j, u64 head, u64 body) {
  return j < head ? j : j + body;
}

// apply2 runs dst[i] = F(dst[i], src[i]) for i in [0, n) over the whole grid
// (grid-stride loops). When dst and src lie at the same distance from a
// 16-byte boundary, the body moves 16 bytes per load and store (coalesced
// across the warp), and only the head (before dst's first boundary) and the
// tail (after the last whole vector) go through the scalar loop: at most
// 2 * (16 / sizeof(S) - 1) elements. When their distances differ no vector
// load can serve both, and the whole buffer takes the scalar loop (still
// coalesced, element by element); device allocations are 256-byte aligned,
// so that is only for sub-buffers cut at odd offsets.
template <class D, class F>
static __device__ __forceinline__ void apply2(typename D::S *__restrict__ dst,
                                              const typename D::S *__restrict__ src,
                                              u64 n, F f) {
  typedef typename D::S S;
  const int V = 16 / sizeof(S);
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  u64 head = n, body = 0;
  if (((u64)dst & 15) == ((u64)src & 15)) {
    head = head_elems<S>(dst, n);
    const u64 nv = (n - head) / V;
    typedef Vec<S> L;
    typedef typename L::T VT;
    VT *dv = (VT *)(dst + head);
    const VT *sv = (const VT *)(src + head);
    for (u64 i = tid; i < nv; i += stride) {
      const VT a = dv[i], b = sv[i];
      VT r = a;
#pragma unroll
      for (int k = 0; k < V; k++) {
        L::set_lane(r, k, D::store(f(D::load(L::lane(a, k)), D::load(L::lane(b, k)))));
      }
      dv[i] = r;
    }
    body = nv * V;
  }
  for (u64 j = tid; j < n - body; j += stride) {
    const u64 i = rest_index(j, head, body);
    dst[i] = D::store(f(D::load(dst[i]), D::load(src[i])));
  }
}

// apply1 runs x[i] = F(x[i]) for i in [0, n), laid out as apply2; with one
// buffer, the body is vectorised at any element-aligned start.
template <class D, class F>
static __device__ __forceinline__ void apply1(typename D::S *__restrict__ x,
                                              u64 n, F f) {
  typedef typename D::S S;
  const int V = 16 / sizeof(S);
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 head = head_elems<S>(x, n);
  const u64 nv = (n - head) / V;
  typedef Vec<S> L;
  typedef typename L::T VT;
  VT *xv = (VT *)(x + head);
  for (u64 i = tid; i < nv; i += stride) {
    const VT a = xv[i];
    VT r = a;
#pragma unroll
    for (int k = 0; k < V; k++) {
      L::set_lane(r, k, D::store(f(D::load(L::lane(a, k)))));
    }
    xv[i] = r;
  }
  const u64 body = nv * V;
  for (u64 j = tid; j < n - body; j += stride) {
    const u64 i = rest_index(j, head, body);
    x[i] = D::store(f(D::load(x[i])));
  }
}

#endif // GOCCL_DTYPES_CUH
