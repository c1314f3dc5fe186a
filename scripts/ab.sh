#!/usr/bin/env bash
# The hot paths of two builds side by side, in alternated rounds: the
# 8-byte allreduce on the board (goroutine ranks and shm processes) and
# the pooled host allreduce over messages (8 B over TCP, which has no
# board, and 16 KiB over shm, past the board's 1 KiB). Each round runs
# both builds, in an order that alternates, so that the machine's drift
# hits both alike; it prints every round's times, then per case the median
# of the per-round ratios new/old, their range and in how many rounds the
# new build was faster. Each run waits for the CPUs to be idle first.
#
#   bash scripts/ab.sh OLD_REV            # HEAD against OLD_REV, 10 rounds
#   ROUNDS=20 bash scripts/ab.sh 24d0854
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: scripts/ab.sh OLD_REV}
rounds=${ROUNDS:-10}
dir=$(mktemp -d)
trap 'git worktree remove --force "$dir/old" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
git worktree add --detach "$dir/old" "$old" >/dev/null 2>&1
(cd "$dir/old" && go build -o "$dir/goccl-old" ./cmd/goccl)
go build -o "$dir/goccl-new" ./cmd/goccl
source scripts/quiet.sh # the script runs from the repository root
time_us() { # binary transport size iters
  quiet
  "$1" bench -q -transport "$2" -n 2 -op allreduce -b "$3" -e "$3" -iters "$4" -w $(( $4 / 10 )) -format json 2>/dev/null |
    sed -n 's/.*"time_us": \([0-9.]*\).*/\1/p'
}
cases=("board-mem mem 8 200000" "board-shm shm 8 200000" "pooled-tcp tcp 8 50000" "pooled-shm shm 16K 20000")
for c in "${cases[@]}"; do
  set -- $c
  : > "$dir/$1"
done
for r in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    set -- $c
    if (( r % 2 )); then o=$(time_us "$dir/goccl-old" "$2" "$3" "$4"); n=$(time_us "$dir/goccl-new" "$2" "$3" "$4")
    else n=$(time_us "$dir/goccl-new" "$2" "$3" "$4"); o=$(time_us "$dir/goccl-old" "$2" "$3" "$4"); fi
    echo "$1 round $r: old $o us, new $n us"
    echo "$o $n" >> "$dir/$1"
  done
done
for c in "${cases[@]}"; do
  set -- $c
  faster=$(awk '$2 < $1' "$dir/$1" | wc -l)
  awk '{ printf "%.4f\n", $2 / $1 }' "$dir/$1" | sort -n |
    awk -v t="$1" -v f="$faster" '{ r[NR] = $1 } END {
      m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
      printf "%s: new/old median %.3f, range %.3f-%.3f, new faster in %d of %d rounds\n", t, m, r[1], r[NR], f, NR }'
done
