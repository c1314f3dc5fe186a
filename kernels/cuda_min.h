// cuda_min.h: the little of CUDA that goccl's kernels use, for clang's NVPTX
// backend without the NVIDIA toolkit. gen.sh passes it with -include, so the
// .cu files do not include it themselves.
//
// Everything here maps one to one onto a clang builtin or a PTX instruction;
// nothing is copied from NVIDIA's headers.
#ifndef GOCCL_CUDA_MIN_H
#define GOCCL_CUDA_MIN_H

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(n) __attribute__((launch_bounds(n)))

// threadIdx, blockIdx, blockDim, gridDim.
#include <__clang_cuda_builtin_vars.h>

#include "base.cuh"

// The target primitives: emu/cuda_host.h defines the same names for the host.
static __device__ __forceinline__ void sync_threads() { __syncthreads(); }

static __device__ __forceinline__ u32 shfl_down_u32(u32 v, u32 delta) {
  return (u32)__nvvm_shfl_sync_down_i32(GOCCL_FULL_MASK, (int)v, delta, 0x1f);
}

static __device__ __forceinline__ double shfl_down_f64(double v, u32 delta) {
  u64 b = (u64)__nvvm_bitcast_d2ll(v);
  u32 lo = shfl_down_u32((u32)b, delta);
  u32 hi = shfl_down_u32((u32)(b >> 32), delta);
  return __nvvm_bitcast_ll2d((long long)(((u64)hi << 32) | lo));
}

static __device__ __forceinline__ u32 ballot(bool p) {
  return __nvvm_vote_ballot_sync(GOCCL_FULL_MASK, p);
}

static __device__ __forceinline__ double sqrt_rn(double x) {
  return __nvvm_sqrt_rn_d(x);
}

static __device__ __forceinline__ u32 float_bits(float f) {
  return (u32)__nvvm_bitcast_f2i(f);
}

static __device__ __forceinline__ float bits_float(u32 b) {
  return __nvvm_bitcast_i2f((int)b);
}

static __device__ __forceinline__ u64 double_bits(double d) {
  return (u64)__nvvm_bitcast_d2ll(d);
}

static __device__ __forceinline__ double bits_double(u64 b) {
  return __nvvm_bitcast_ll2d((long long)b);
}

// IEEE binary16 <-> float32 with the hardware conversions (sm_53 and later):
// exact widening, round-to-nearest-even narrowing.
static __device__ __forceinline__ float half_to_float(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

static __device__ __forceinline__ u16 float_to_half(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

#endif // GOCCL_CUDA_MIN_H
