#!/bin/sh
# run.sh: on a GPU machine, check and measure goccl's GPU half in one
# command. Go is not installed there, so build the binaries on a machine
# with Go first (the CUDA headers and stubs from scripts/cuda-sdk.sh):
#
#   eval "$(scripts/cuda-sdk.sh env)"; export CGO_ENABLED=1
#   go test -c -tags cuda -o .gpu/cuda.test ./device/cuda
#   go build -tags cuda -o .gpu/goccl ./cmd/goccl
#
# then, from the repository root on the GPU machine (OUT defaults to .):
#
#   sh device/cuda/gpubench/run.sh
#
# It runs the kernel and 1-bit correctness tests (device/cuda, including
# onebit's compressed allreduce on device buffers over 2-4 goroutine ranks),
# the Go benchmarks and the CuPy baselines, then the collectives on device
# buffers with -check: 2 to 4 ranks as processes on this GPU over shared
# memory (device to device through CUDA IPC, and staged with
# GOCCL_DEVICE_IPC=0) and as goroutines over mem; and the 256 MiB
# allreduce busbw between two processes both ways. Everything goes to
# $OUT/gpubench.log.
set -u
OUT=${OUT:-.}
log="$OUT/gpubench.log"
bin=${CUDA_TEST:-.gpu/cuda.test}
goccl=${GOCCL:-.gpu/goccl}
{
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
	echo "== ptxas check of the committed PTX"
	ptxas -arch=sm_70 -o /dev/null kernels/goccl.ptx && echo "ptxas sm_70 ok"
	ptxas -arch=sm_90 -o /dev/null kernels/goccl.ptx && echo "ptxas sm_90 ok"
	echo "== go tests"
	(cd device/cuda && "../../$bin" -test.v -test.run . 2>&1)
	echo "== go benchmarks"
	(cd device/cuda && "../../$bin" -test.run '^$' -test.bench . -test.benchtime 20x -test.count 5 2>&1)
	echo "== cupy baselines"
	python3 device/cuda/gpubench/bench.py 2>&1
	echo "== collectives on device buffers, -check (every row's #wrong must be 0)"
	for n in 2 3 4; do
		for op in allreduce reducescatter allgather broadcast onebit; do
			for t in shm mem; do
				echo "-- $op, $n ranks, transport $t"
				"$goccl" bench -device cuda -transport "$t" -n "$n" -op "$op" -b 8 -e 64M -f 8 -w 2 -iters 5 -check -q 2>&1
			done
			echo "-- $op, $n ranks, transport shm, GOCCL_DEVICE_IPC=0 (staged)"
			GOCCL_DEVICE_IPC=0 "$goccl" bench -device cuda -transport shm -n "$n" -op "$op" -b 8 -e 64M -f 8 -w 2 -iters 5 -check -q 2>&1
		done
	done
	echo "== 256 MiB allreduce between two processes, alternating IPC and staged, 3 rounds"
	for round in 1 2 3; do
		echo "-- round $round: IPC"
		"$goccl" bench -device cuda -transport shm -n 2 -b 256M -e 256M -w 5 -iters 20 -q 2>&1
		echo "-- round $round: staged"
		GOCCL_DEVICE_IPC=0 "$goccl" bench -device cuda -transport shm -n 2 -b 256M -e 256M -w 5 -iters 20 -q 2>&1
	done
} | tee "$log"
