#!/usr/bin/env bash
# Regenerates the figures in BENCHMARKS.md on this machine, in one run:
# the limits first, then goccl's collectives against them.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o /tmp/goccl-bench ./cmd/goccl
g=/tmp/goccl-bench
echo "## $(date -u +%F) $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo; echo "### limits"; $g limits
for t in mem tcp; do
  for n in 2 4; do
    for op in allreduce allgather broadcast; do
      echo; echo "### $op, $n ranks, $t"
      $g bench -q -transport $t -n $n -op $op -algo all -b 1K -e 64M -f 256 -w 2 -iters 10 -format csv
    done
  done
done
echo; echo "### small-message latency: 64 bytes, every algorithm, 2000 iterations"
for t in mem tcp; do
  for n in 2 4; do
    for op in allreduce allgather broadcast; do
      $g bench -q -transport $t -n $n -op $op -algo all -b 64 -e 64 -w 200 -iters 2000 -format csv | tail -n +2
    done
  done
done
echo; echo "### goals (issue 4): five rounds, 2 processes over TCP loopback"
# Each round: the loopback limits, the single-stream throughput as goccl
# bench measures it (sendrecv: both ranks send and receive at once, as in
# nccl-tests), the 64 MiB ring allreduce, and the 8-byte allreduce.
for round in 1 2 3 4 5; do
  echo "round $round"
  $g limits | grep -E 'one stream|both ways|round trip'
  $g bench -q -n 2 -op sendrecv -b 64M -e 64M -w 2 -iters 40 -format csv | tail -1
  $g bench -q -n 2 -op allreduce -algo ring -b 64M -e 64M -w 2 -iters 40 -format csv | tail -1
  $g bench -q -n 2 -op allreduce -b 8 -e 8 -w 200 -iters 5000 -format csv | tail -1
done
echo; echo "### 8-byte allreduce latency per algorithm, 2 processes over TCP (5000 iterations)"
$g bench -q -n 2 -b 8 -e 8 -w 200 -iters 5000 -algo all -format csv
echo; echo "### mismatch check on and off, 8-byte allreduce between 2 processes (issue 7)"
go test -run '^$' -bench 'MismatchCheckTCP' -benchtime 100000x -count 5 . | grep Benchmark
