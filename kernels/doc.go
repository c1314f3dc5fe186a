// Package kernels holds goccl's CUDA kernels: the CUDA C sources (*.cu), the
// PTX that clang generates from them (goccl.ptx, committed), and the names of
// the entry points in it.
//
// It is only bytes and names: it needs no CUDA toolkit, driver or GPU, and
// builds with or without the cuda build tag. Package device/cuda loads PTX()
// into the driver once per context (cuModuleLoadData), which JIT-compiles it
// for the GPU at hand, and launches the kernels named here.
//
// # Kernels
//
//   - goccl_reduce_<dtype>_<op>(dst, src, n): dst[i] = dst[i] op src[i] for
//     i < n, for every reduceop.DType and every op reduceop.Check allows
//     (reduceop.Avg uses the sum kernel; see ReduceKernelName).
//   - goccl_scale_<dtype>(x, n, size): x[i] = x[i] / size, the final step of
//     reduceop.Avg, float dtypes only.
//   - goccl_onebit_*: package onebit's Kernel on the device, the steps of
//     1-bit compressed allreduce with error feedback: compensate fused with
//     the sum of squares, the scale, sign packing fused with the error
//     update, and unpacking; see OneBitCompensateSumSq and the others.
//     Sign packing has two entry points with the same results:
//     OneBitPackUpdate (one thread per byte of bits, the default) and
//     OneBitPackUpdateBallot (one thread per element, 32 signs per warp
//     ballot, one 4-byte store per warp); which is faster awaits a GPU
//     benchmark.
//
// Every kernel is written for BlockSize threads per block and any number of
// blocks (grid-stride loops); device/cuda sizes grids from the device's
// multiprocessor count. Element counts are uint64. The elementwise kernels
// move data with 16-byte loads and stores at any start: the elements before
// the first 16-byte boundary and after the last whole vector take a scalar
// loop. For two buffers (reduce, compensate) that holds when they lie at the
// same distance from a 16-byte boundary (as all of cuMemAlloc's buffers and
// equal offsets into them do); otherwise the scalar loop takes all. The
// unpack kernels (accumulate, decompress) realign the bits to a float
// buffer at any start; OneBitPackUpdate vectorises 16-byte aligned err only
// (OneBitPackUpdateBallot uses no vectors and cares for no alignment).
//
// # Testing without a GPU
//
// The emulator in emu/ compiles the same .cu files as host C++ (with
// emu/cuda_host.h in place of cuda_min.h) and runs every block and thread
// of a launch, __syncthreads and the warp shuffle and ballot included, on
// the CPU; TestEmulator checks every kernel against reduceop and
// onebit.HostKernel at awkward sizes, start offsets 0..15 and grids smaller
// and larger than the data. It needs clang++; see emu/README.md.
//
// # Regenerating
//
// After editing a .cu or .cuh file or cuda_min.h:
//
//	go generate ./kernels
//
// runs gen.sh, which needs clang (Debian's clang 14 made the committed PTX;
// set CLANG to pick another). CI regenerates and fails on any difference:
//
//	go generate ./kernels && git diff --exit-code kernels/
package kernels
