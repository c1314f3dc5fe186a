// scale.cu: the last step of reduceop.Avg, x[i] = x[i] / n, named
// goccl_scale_<dtype> for the float dtypes (f32 f64 f16 bf16). It divides
// (it does not multiply by 1/n, which rounds differently), in float32 for
// f32, f16 and bf16 and in float64 for f64. Arguments: (x, count, n) with
// count in elements and n the group size.
#include "dtypes.cuh"

template <class C> struct DivBy {
  C d;
  __device__ __forceinline__ C operator()(C x) const { return x / d; }
};

#define GOCCL_SCALE(dt, D)                                                   \
  extern "C" __global__ void __launch_bounds__(GOCCL_BLOCK)                 \
      goccl_scale_##dt(D::S *__restrict__ x, u64 count, u32 n) {            \
    DivBy<D::C> f = {(D::C)n};                                               \
    apply1<D>(x, count, f);                                                  \
  }

GOCCL_SCALE(f32, DF32)
GOCCL_SCALE(f64, DF64)
GOCCL_SCALE(f16, DF16)
GOCCL_SCALE(bf16, DBF16)
