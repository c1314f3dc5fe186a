#!/usr/bin/env bash
# AllReduceCoalesced of 16 slices of 1 MiB beside AllReduce of one 16 MiB
# slice, in alternated rounds, on goroutine ranks (mem) and on processes
# over shared memory (shm): goccl bench -parts 16 against -parts 1 with
# the same binary, so that the machine's drift hits both alike. Prints
# each round's times and the ratios coalesced/flat (issue 34: within 10%).
#
#   bash scripts/coalesced.sh            # 8 rounds
#   ROUNDS=20 bash scripts/coalesced.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-8}
bin=$(mktemp -d)/goccl
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/goccl
source scripts/quiet.sh # the script runs from the repository root
time_us() { # transport n parts
  quiet
  "$bin" bench -q -transport "$1" -n "$2" -parts "$3" -b 16M -e 16M -w 5 -iters 40 -format json 2>/dev/null |
    sed -n 's/.*"time_us": \([0-9.]*\).*/\1/p'
}
for cfg in "mem 2" "mem 4" "shm 2"; do
  set -- $cfg
  ratios=()
  for r in $(seq "$rounds"); do
    if (( r % 2 )); then flat=$(time_us "$1" "$2" 1); coal=$(time_us "$1" "$2" 16)
    else coal=$(time_us "$1" "$2" 16); flat=$(time_us "$1" "$2" 1); fi
    ratio=$(awk -v a="$coal" -v b="$flat" 'BEGIN { printf "%.3f", a / b }')
    ratios+=("$ratio")
    echo "$1 n=$2 round $r: 16 MiB ${flat} us, 16 x 1 MiB ${coal} us, ratio $ratio"
  done
  printf '%s\n' "${ratios[@]}" | sort -n | awk -v t="$1 n=$2" '{ a[NR] = $1 } END {
    m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "%s: coalesced/flat median %.3f, range %.3f-%.3f over %d rounds\n", t, m, a[1], a[NR], NR }'
done
