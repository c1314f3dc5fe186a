// onebit.cu: the device side of onebit.Kernel (package onebit), the steps of
// 1-bit compressed allreduce with error feedback, on float32 buffers. Each
// kernel computes the Go loop in the doc comment of the onebit.Kernel method
// it is named after, with
//
//   sign(i) = !(err[i] < 0)       when packing: +0, -0 and NaN count as positive
//                                 (DeepSpeed's x.sign().add_(1).bool())
//   bit i   = bits[i/8] >> (7 - i%8) & 1   most significant bit first (numpy.packbits)
//
// Two passes over the data per compression, fused where the math allows:
//   1. goccl_onebit_compensate_sumsq: err += x and the sum of squares of err
//      (per-block float64 partials), then goccl_onebit_finish: the total and
//      scale = float32(sqrt(ss)) / float32(sqrt(n)) (onebit's rms);
//   2. goccl_onebit_pack_update: the sign bits of err and err -= +-scale.
// Then goccl_onebit_accumulate_signs (dst += +-scale) and
// goccl_onebit_decompress (dst = +-scale) read packed bits back.
// The scale is read through a device pointer so that the launches chain on
// one stream without a trip to the host.
//
// goccl_onebit_pack_update_ballot is a second packing kernel with the same
// parameters and results: one element per lane, the 32 signs of a warp
// gathered by one ballot and stored as one 4-byte word. Which of the two is
// faster is for a GPU benchmark to say; pack_update stays the default.
#include "dtypes.cuh"

// goccl_onebit_compensate_sumsq(err, x, nx, n, partial):
//   for i := range x[:nx] { err[i] += x[i] }
//   partial[blockIdx] = sum over this block's share of i < n of float64(err[i])^2
// nx <= n; elements nx..n-1 of err are only squared (zero padding of x).
// The share of each block depends only on gridDim, so for a given grid the
// result is the same from run to run.
extern "C" __global__ void __launch_bounds__(GOCCL_BLOCK)
    goccl_onebit_compensate_sumsq(float *__restrict__ err, const float *__restrict__ x,
                                  u64 nx, u64 n, double *__restrict__ partial) {
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  double acc = 0;
  // Vectors of 4 floats when err and x share their alignment, with the
  // head and tail in the scalar loop, as apply2 in dtypes.cuh.
  u64 head = n, body = 0;
  if (((u64)err & 15) == ((u64)x & 15)) {
    head = head_elems<float>(err, n);
    const u64 nv = (n - head) / 4, nxv = nx > head ? (nx - head) / 4 : 0;
    v16 *ev = (v16 *)(err + head);
    const v16 *xv = (const v16 *)(x + head);
    for (u64 i = tid; i < nv; i += stride) {
      v16 e = ev[i];
      const u64 first = head + 4 * i;
      if (i < nxv) {
        const v16 a = xv[i];
        e.x = float_bits(bits_float(e.x) + bits_float(a.x));
        e.y = float_bits(bits_float(e.y) + bits_float(a.y));
        e.z = float_bits(bits_float(e.z) + bits_float(a.z));
        e.w = float_bits(bits_float(e.w) + bits_float(a.w));
        ev[i] = e;
      } else if (first < nx) { // the vector that straddles nx
        for (u64 k = first; k < nx; k++) err[k] += x[k];
        e = ev[i];
      }
      const double a = bits_float(e.x), b = bits_float(e.y), c = bits_float(e.z), d = bits_float(e.w);
      acc += a * a + b * b + c * c + d * d;
    }
    body = nv * 4;
  }
  for (u64 j = tid; j < n - body; j += stride) {
    const u64 i = rest_index(j, head, body);
    float e = err[i];
    if (i < nx) {
      e += x[i];
      err[i] = e;
    }
    acc += (double)e * (double)e;
  }

  // Block reduction: shuffle within each warp, then warp 0 adds the warps.
  __shared__ double warp_sum[GOCCL_BLOCK / GOCCL_WARP];
  for (u32 d = GOCCL_WARP / 2; d > 0; d /= 2) acc += shfl_down_f64(acc, d);
  const u32 lane = threadIdx.x % GOCCL_WARP, warp = threadIdx.x / GOCCL_WARP;
  if (lane == 0) warp_sum[warp] = acc;
  sync_threads();
  if (warp == 0) {
    acc = lane < blockDim.x / GOCCL_WARP ? warp_sum[lane] : 0;
    for (u32 d = GOCCL_WARP / 2; d > 0; d /= 2) acc += shfl_down_f64(acc, d);
    if (lane == 0) partial[blockIdx.x] = acc;
  }
}

// goccl_onebit_finish(partial, nparts, n, ss, scale), one block:
//   *ss = sum(partial[:nparts])
//   *scale = float32(math.Sqrt(*ss)) / float32(math.Sqrt(float64(n)))   (n > 0)
extern "C" __global__ void __launch_bounds__(GOCCL_BLOCK)
    goccl_onebit_finish(const double *__restrict__ partial, u32 nparts, u64 n,
                        double *__restrict__ ss, float *__restrict__ scale) {
  double acc = 0;
  for (u32 i = threadIdx.x; i < nparts; i += blockDim.x) acc += partial[i];
  __shared__ double warp_sum[GOCCL_BLOCK / GOCCL_WARP];
  for (u32 d = GOCCL_WARP / 2; d > 0; d /= 2) acc += shfl_down_f64(acc, d);
  const u32 lane = threadIdx.x % GOCCL_WARP, warp = threadIdx.x / GOCCL_WARP;
  if (lane == 0) warp_sum[warp] = acc;
  sync_threads();
  if (warp == 0) {
    acc = lane < blockDim.x / GOCCL_WARP ? warp_sum[lane] : 0;
    for (u32 d = GOCCL_WARP / 2; d > 0; d /= 2) acc += shfl_down_f64(acc, d);
    if (lane == 0) {
      *ss = acc;
      *scale = (float)sqrt_rn(acc) / (float)sqrt_rn((double)n);
    }
  }
}

// pos is sign(i) for packing: 1 unless x < 0.
static __device__ __forceinline__ u32 pos(float x) { return !(x < 0.0f); }

// pack4 packs four values into bits 7-k0 .. 4-k0 of a byte and subtracts
// +-s from each.
static __device__ __forceinline__ u32 pack4(v16 &e, int k0, float s) {
  const float a = bits_float(e.x), b = bits_float(e.y), c = bits_float(e.z), d = bits_float(e.w);
  const u32 pa = pos(a), pb = pos(b), pc = pos(c), pd = pos(d);
  e.x = float_bits(a - (pa ? s : -s));
  e.y = float_bits(b - (pb ? s : -s));
  e.z = float_bits(c - (pc ? s : -s));
  e.w = float_bits(d - (pd ? s : -s));
  return pa << (7 - k0) | pb << (6 - k0) | pc << (5 - k0) | pd << (4 - k0);
}

// goccl_onebit_pack_update(bits, err, n, scale), one thread per byte:
//   for i := range err[:n] {
//       if sign(i) { bits[i/8] |= 1 << (7 - i%8); err[i] -= *scale } else { err[i] -= -*scale }
//   }
// (bits zeroed first; the unused low bits of the last byte are 0).
extern "C" __global__ void __launch_bounds__(GOCCL_BLOCK)
    goccl_onebit_pack_update(u8 *__restrict__ bits, float *__restrict__ err, u64 n,
                             const float *__restrict__ scale) {
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const float s = *scale;
  const u64 full = n / 8, nbytes = (n + 7) / 8;
  const bool vec = aligned16(err);
  for (u64 j = tid; j < nbytes; j += stride) {
    if (vec && j < full) {
      v16 *ev = (v16 *)err + 2 * j;
      v16 lo = ev[0], hi = ev[1];
      const u32 byte = pack4(lo, 0, s) | pack4(hi, 4, s);
      ev[0] = lo;
      ev[1] = hi;
      bits[j] = (u8)byte;
      continue;
    }
    const u64 base = 8 * j;
    const u32 m = n - base < 8 ? (u32)(n - base) : 8;
    u32 byte = 0;
    for (u32 k = 0; k < m; k++) {
      const float e = err[base + k];
      const u32 p = pos(e);
      byte |= p << (7 - k);
      err[base + k] = e - (p ? s : -s);
    }
    bits[j] = (u8)byte;
  }
}

// msb_first turns a ballot (bit k: the sign of element k of 32) into the
// packed word of those 32 elements as it lies in memory: byte b holds
// elements 8b..8b+7 with element 8b in its most significant bit, and the
// word is stored little-endian. Reversing the 32 bits puts element 8b+j at
// bit 31-8b-j, which is bit 7-j of byte 3-b; swapping the bytes moves it to
// byte b.
static __device__ __forceinline__ u32 msb_first(u32 ballot_bits) {
  return __builtin_bswap32(__builtin_bitreverse32(ballot_bits));
}

// goccl_onebit_pack_update_ballot(bits, err, n, scale): the loop of
// goccl_onebit_pack_update, one element per thread. Each warp step covers
// 32 elements: every lane updates its element, one ballot gathers the 32
// signs, and lane 0 stores them as one 4-byte word (when bits is 4-byte
// aligned and all four bytes lie within (n+7)/8; otherwise lanes 0-3 store
// the bytes that do). Lanes past n vote 0, so the bits past n are 0. The
// loop bound is the same for all lanes of a warp, as the ballot needs.
extern "C" __global__ void __launch_bounds__(GOCCL_BLOCK)
    goccl_onebit_pack_update_ballot(u8 *__restrict__ bits, float *__restrict__ err, u64 n,
                                    const float *__restrict__ scale) {
  const u32 lane = threadIdx.x % GOCCL_WARP;
  const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / GOCCL_WARP;
  const u64 nwarps = (u64)gridDim.x * (blockDim.x / GOCCL_WARP);
  const float s = *scale;
  const u64 nbytes = (n + 7) / 8, steps = (n + 31) / 32;
  const bool words = ((u64)bits & 3) == 0;
  for (u64 w = warp; w < steps; w += nwarps) {
    const u64 i = 32 * w + lane;
    bool p = false;
    if (i < n) {
      const float e = err[i];
      p = pos(e);
      err[i] = e - (p ? s : -s);
    }
    const u32 word = msb_first(ballot(p));
    const u64 left = nbytes - 4 * w;
    if (words && left >= 4) {
      if (lane == 0) ((u32 *)bits)[w] = word;
    } else if (lane < 4 && lane < left) {
      bits[4 * w + lane] = (u8)(word >> (8 * lane));
    }
  }
}

// pm returns bit k of byte (k = 0 is the most significant bit) as +s or -s.
static __device__ __forceinline__ float pm(u32 byte, u32 k, float s) {
  return (byte >> (7 - k)) & 1 ? s : -s;
}

// pm4 returns pm(byte, k0 .. k0+3) as one 16-byte vector, each added to the
// matching float of o when Add.
template <bool Add>
static __device__ __forceinline__ v16 pm4(u32 byte, u32 k0, float s, v16 o) {
  v16 r;
  r.x = float_bits(Add ? bits_float(o.x) + pm(byte, k0, s) : pm(byte, k0, s));
  r.y = float_bits(Add ? bits_float(o.y) + pm(byte, k0 + 1, s) : pm(byte, k0 + 1, s));
  r.z = float_bits(Add ? bits_float(o.z) + pm(byte, k0 + 2, s) : pm(byte, k0 + 2, s));
  r.w = float_bits(Add ? bits_float(o.w) + pm(byte, k0 + 3, s) : pm(byte, k0 + 3, s));
  return r;
}

// unpack_body is y[i] = (Add ? y[i] : 0) + (bit i ? s : -s) for i < n. The
// body writes 8 floats (two 16-byte vectors) per step from 8 bits. When y
// is not 16-byte aligned, the head (the 1-3 elements before y's first
// 16-byte boundary) goes to the scalar loop, and the 8 elements of body
// step j, head+8j .. head+8j+7, take their bits from the 16-bit window of
// bytes j and j+1: those are its bits 15-head .. 8-head, so the window
// shifted right by 8-head is the byte they would have at head 0.
template <bool Add>
static __device__ __forceinline__ void unpack_body(float *__restrict__ y,
                                                   const u8 *__restrict__ bits, u64 n,
                                                   const float *__restrict__ scale) {
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const float s = *scale;
  const u64 head = head_elems<float>(y, n), steps = (n - head) / 8;
  for (u64 j = tid; j < steps; j += stride) {
    u32 byte = bits[j];
    if (head != 0) byte = (byte << 8 | bits[j + 1]) >> (8 - head) & 0xff;
    v16 *yv = (v16 *)(y + head) + 2 * j;
    v16 o0 = {0, 0, 0, 0}, o1 = {0, 0, 0, 0};
    if (Add) {
      o0 = yv[0];
      o1 = yv[1];
    }
    yv[0] = pm4<Add>(byte, 0, s, o0);
    yv[1] = pm4<Add>(byte, 4, s, o1);
  }
  const u64 body = 8 * steps;
  for (u64 j = tid; j < n - body; j += stride) {
    const u64 i = rest_index(j, head, body);
    const float v = pm(bits[i / 8], i % 8, s);
    y[i] = Add ? y[i] + v : v;
  }
}

// goccl_onebit_accumulate_signs(dst, bits, n, scale):
//   for i := range dst[:n] { if bit i == 1 { dst[i] += *scale } else { dst[i] += -*scale } }
extern "C" __global__ void __launch_bounds__(GOCCL_BLOCK)
    goccl_onebit_accumulate_signs(float *__restrict__ dst, const u8 *__restrict__ bits,
                                  u64 n, const float *__restrict__ scale) {
  unpack_body<true>(dst, bits, n, scale);
}

// goccl_onebit_decompress(dst, bits, n, scale):
//   for i := range dst[:n] { if bit i == 1 { dst[i] = *scale } else { dst[i] = -*scale } }
extern "C" __global__ void __launch_bounds__(GOCCL_BLOCK)
    goccl_onebit_decompress(float *__restrict__ dst, const u8 *__restrict__ bits,
                            u64 n, const float *__restrict__ scale) {
  unpack_body<false>(dst, bits, n, scale);
}
