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
echo; echo "### goals: 64 MiB ring allreduce, 2 processes over TCP"
$g bench -q -n 2 -op allreduce -algo ring -b 64M -e 64M -w 2 -iters 20 -format csv
echo; echo "### 8-byte allreduce latency, 2 processes over TCP (2000 iterations)"
$g bench -q -n 2 -b 8 -e 8 -w 100 -iters 2000 -algo all -format csv
