// cuda_host.h: the host stand-in for cuda_min.h. Compiling the kernel
// sources as host C++ with -include emu/cuda_host.h (instead of cuda_min.h)
// gives every kernel as a plain function that one emulated GPU thread runs;
// driver.cc runs all threads of every block of a launch as fibers. See
// README.md.
//
// Each primitive here has the semantics of the PTX instruction that
// cuda_min.h uses for it, as far as results are concerned: IEEE
// round-to-nearest-even arithmetic (the host's SSE2 float and double, with
// -ffp-contract=off as on the device), a block-wide barrier, and the warp
// shuffle and ballot across the 32 lanes of a warp.
#ifndef GOCCL_CUDA_HOST_H
#define GOCCL_CUDA_HOST_H

#define __global__
#define __device__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(n)
// Blocks run one at a time, so one static per __shared__ variable is the
// block's shared memory. The section lets the driver fill all of them with
// a poison pattern before each block (shared memory starts undefined on a
// GPU), and "used" keeps the compiler from assuming that no one else can see
// the variable across a barrier.
#define __shared__ static __attribute__((section("goccl_shared"), used))

struct emu_dim3 {
  unsigned int x, y, z;
};

// The emulator's state: the running thread's index (it changes at every
// fiber switch, so it is read through emu_thread_idx) and the launch
// geometry, which is the same for every thread of a block.
extern "C" const emu_dim3 *emu_thread_idx();
extern "C" emu_dim3 emu_block_idx, emu_block_dim, emu_grid_dim;
#define threadIdx (*emu_thread_idx())
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim

// Points where a thread waits for others: driver.cc switches fibers there.
extern "C" void emu_sync_threads();
extern "C" unsigned int emu_shfl_down(unsigned int v, unsigned int delta);
extern "C" unsigned int emu_ballot(bool p);

#include "../base.cuh"

static inline void sync_threads() { emu_sync_threads(); }

// shfl.sync.down.b32 with c = 0x1f: lane i gets lane i+delta's value, or its
// own when i+delta > 31.
static inline u32 shfl_down_u32(u32 v, u32 delta) { return emu_shfl_down(v, delta); }

static inline u32 float_bits(float f) { return __builtin_bit_cast(u32, f); }
static inline float bits_float(u32 b) { return __builtin_bit_cast(float, b); }
static inline u64 double_bits(double d) { return __builtin_bit_cast(u64, d); }
static inline double bits_double(u64 b) { return __builtin_bit_cast(double, b); }

static inline double shfl_down_f64(double v, u32 delta) {
  const u64 b = double_bits(v);
  const u32 lo = shfl_down_u32((u32)b, delta);
  const u32 hi = shfl_down_u32((u32)(b >> 32), delta);
  return bits_double((u64)hi << 32 | lo);
}

// vote.sync.ballot.b32: bit i is lane i's predicate.
static inline u32 ballot(bool p) { return emu_ballot(p); }

// sqrt.rn.f64: SSE2's sqrtsd is correctly rounded too.
static inline double sqrt_rn(double x) { return __builtin_sqrt(x); }

// cvt.f32.f16: exact. A NaN keeps its sign and payload (quiet bit set); the
// tests never depend on a NaN's payload, since GPUs return their canonical
// NaN from arithmetic anyway.
static inline float half_to_float(u16 h) {
  const u32 sign = (u32)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | frac << 13 | (frac ? 0x400000u : 0));
  if (exp != 0) return bits_float(sign | (exp + 112) << 23 | frac << 13);
  // Zero or subnormal: frac * 2^-24, exact in float32.
  return bits_float(sign | float_bits((float)frac * 0x1p-24f));
}

// cvt.rn.f16.f32: round to nearest, ties to even, overflow to infinity,
// subnormal results kept (no flush to zero); NaN becomes the canonical
// 0x7fff.
static inline u16 float_to_half(float f) {
  const u32 x = float_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7fff;
  if (ax >= 0x477ff000u) return (u16)(sign | 0x7c00); // >= 65520 rounds to Inf
  if (ax >= 0x38800000u) {                            // normal binary16 (>= 2^-14)
    u32 r = ax - 0x38000000u;                         // rebias 127 -> 15
    r += 0xfffu + ((r >> 13) & 1);
    return (u16)(sign | r >> 13);
  }
  if (ax <= 0x33000000u) return (u16)sign; // <= 2^-25 rounds to zero (2^-25 is a tie to even 0)
  // Subnormal binary16: the 24-bit significand m times 2^(e-150), in units
  // of 2^-24, is m >> (126-e), rounded to nearest even.
  const u32 e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
  u32 q = m >> shift;
  const u32 rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return (u16)(sign | q);
}

#endif // GOCCL_CUDA_HOST_H
