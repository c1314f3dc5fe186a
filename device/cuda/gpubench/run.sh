#!/bin/sh
# run.sh: on a GPU machine, check and measure goccl's CUDA kernels in one
# command. Go is not installed there, so build the test binary on a machine
# with Go first (see /work/shared/GPU.md and device/cuda/README.md):
#
#   CGO_CFLAGS="-I$PWD/device/cuda/compat -I$PWD/.cuda" CGO_LDFLAGS="-L$PWD/.cuda" \
#     go test -c -tags cuda -o .gpu/cuda.test ./device/cuda
#
# then, from the repository root on the GPU machine (OUT defaults to .):
#
#   sh device/cuda/gpubench/run.sh
#
# It runs the correctness tests, the Go benchmarks and the CuPy baselines,
# and writes everything to $OUT/gpubench.log.
set -u
OUT=${OUT:-.}
log="$OUT/gpubench.log"
bin=${CUDA_TEST:-.gpu/cuda.test}
{
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
	echo "== ptxas check of the committed PTX"
	ptxas -arch=sm_70 -o /dev/null kernels/goccl.ptx && echo "ptxas sm_70 ok"
	ptxas -arch=sm_90 -o /dev/null kernels/goccl.ptx && echo "ptxas sm_90 ok"
	echo "== go tests"
	"$bin" -test.v -test.run . 2>&1
	echo "== go benchmarks"
	"$bin" -test.run '^$' -test.bench . -test.benchtime 20x -test.count 5 2>&1
	echo "== cupy baselines"
	python3 device/cuda/gpubench/bench.py 2>&1
} | tee "$log"
