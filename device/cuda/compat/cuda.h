/* cuda.h: goccl's wrapper around the installed CUDA driver header.
 *
 * Put device/cuda/compat first on the C include path (CGO_CFLAGS="-I<repo>/
 * device/cuda/compat -I<cuda>/include"); every `#include <cuda.h>` in
 * gorgonia.org/cu then reaches this file, which includes the real header and
 * declares what gorgonia.org/cu v0.9.6 still calls but newer headers dropped.
 * See README.md beside this directory. UNVERIFIED until built on a GPU
 * machine with CUDA 13 headers.
 */
#ifndef GOCCL_COMPAT_CUDA_H
#define GOCCL_COMPAT_CUDA_H
#include_next <cuda.h>
#include "cuda_compat.h"
#endif
