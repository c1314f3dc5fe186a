#!/bin/sh
# run.sh: run device/cuda's cuda-tagged tests against fakecuda.c instead of
# a GPU. From the repository root, with the CUDA 11.8 headers and link stubs
# in .cuda/sdk-11.8 (scripts/cuda-sdk.sh):
#
#   sh device/cuda/compat/fakecuda/run.sh            # all tests but TestIPC
#   sh device/cuda/compat/fakecuda/run.sh -race      # the same under the race detector
#
# What passes here says that goccl's Go side drives the driver API as
# intended; the kernels themselves are checked only on a GPU (gpubench/run.sh).
set -eu
sdk=${GOCCL_CUDA_SDK:-$PWD/.cuda/sdk-11.8}
out=$PWD/.cuda/fake
mkdir -p "$out"
gcc -O1 -Wall -shared -fPIC -o "$out/libcuda.so.1" device/cuda/compat/fakecuda/fakecuda.c -lpthread -lm
CGO_CFLAGS="-I$PWD/device/cuda/compat -I$sdk/usr/include" \
CGO_LDFLAGS="-L$sdk/usr/lib/x86_64-linux-gnu/stubs" \
	go test "$@" -tags cuda -c -o "$out/cuda.test" ./device/cuda
cd device/cuda
LD_LIBRARY_PATH=$out "$out/cuda.test" -test.skip '^TestIPC$' -test.count 1
