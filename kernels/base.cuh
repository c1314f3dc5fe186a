// base.cuh: what the kernels need that is the same on every target: the
// integer typedefs, the launch constants and the 16-byte vector. cuda_min.h
// (NVPTX, for goccl.ptx) and emu/cuda_host.h (the host emulator) include it
// after defining __device__ and __forceinline__.
#ifndef GOCCL_BASE_CUH
#define GOCCL_BASE_CUH

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char i8;
typedef int i32;
typedef long long i64;

// Every kernel is launched with GOCCL_BLOCK threads per block (the Go side
// reads the same number from kernels.BlockSize).
#define GOCCL_BLOCK 256
#define GOCCL_WARP 32
#define GOCCL_FULL_MASK 0xffffffffu

// v16 is one 16-byte vector: a load or store of it is one ld/st.global.v4.u32.
struct __attribute__((aligned(16))) v16 {
  u32 x, y, z, w;
};

static __device__ __forceinline__ bool aligned16(const void *p) {
  return ((u64)p & 15) == 0;
}

#endif // GOCCL_BASE_CUH
