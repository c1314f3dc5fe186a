// goccl.cu: the one translation unit gen.sh compiles, so that the kernels
// form one PTX module (goccl.ptx) that device/cuda loads once.
#include "reduce.cu"
#include "scale.cu"
#include "onebit.cu"
