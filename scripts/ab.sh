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
#
# LAYOUTS=K builds each side K times with the linker's function order
# randomized (-ldflags=-randlayout=SEED, seeds 1..K) and runs round r on
# seed (r-1)%K+1 for both: code placement alone moves a 0.2 us loop by
# 5-15% in either direction, so one fixed layout a side compares two
# placements as much as two codes; over many layouts placement averages
# out and what is left is the code's. It also prints the medians per seed.
# CASES="pooled-shm board-shm" runs only the cases named.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: scripts/ab.sh OLD_REV}
rounds=${ROUNDS:-10}
dir=$(mktemp -d)
trap 'git worktree remove --force "$dir/old" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
git worktree add --detach "$dir/old" "$old" >/dev/null 2>&1
layouts=${LAYOUTS:-0}
build() { # dir, output name, seed (0: the linker's own order)
  local ld=
  (( $3 > 0 )) && ld="-ldflags=-randlayout=$3"
  (cd "$1" && go build $ld -o "$dir/$2-$3" ./cmd/goccl)
}
for s in $(seq 0 "$layouts"); do
  (( layouts > 0 && s == 0 )) && continue
  build "$dir/old" goccl-old "$s"
  build . goccl-new "$s"
done
source scripts/quiet.sh # the script runs from the repository root
time_us() { # binary transport size iters
  quiet
  "$1" bench -q -transport "$2" -n 2 -op allreduce -b "$3" -e "$3" -iters "$4" -w $(( $4 / 10 )) -format json 2>/dev/null |
    sed -n 's/.*"time_us": \([0-9.]*\).*/\1/p'
}
cases=("board-mem mem 8 200000" "board-shm shm 8 200000" "pooled-tcp tcp 8 50000" "pooled-shm shm 16K 20000")
if [ -n "${CASES:-}" ]; then # CASES="pooled-shm board-shm": only those
  picked=()
  for c in "${cases[@]}"; do
    [[ " $CASES " == *" ${c%% *} "* ]] && picked+=("$c")
  done
  cases=("${picked[@]}")
fi
for c in "${cases[@]}"; do
  set -- $c
  : > "$dir/$1"
done
for r in $(seq "$rounds"); do
  seed=0
  (( layouts > 0 )) && seed=$(( (r - 1) % layouts + 1 ))
  for c in "${cases[@]}"; do
    set -- $c
    old_bin=$dir/goccl-old-$seed new_bin=$dir/goccl-new-$seed
    if (( r % 2 )); then o=$(time_us "$old_bin" "$2" "$3" "$4"); n=$(time_us "$new_bin" "$2" "$3" "$4")
    else n=$(time_us "$new_bin" "$2" "$3" "$4"); o=$(time_us "$old_bin" "$2" "$3" "$4"); fi
    echo "$1 round $r (layout $seed): old $o us, new $n us"
    echo "$o $n $seed" >> "$dir/$1"
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
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for c in "${cases[@]}"; do
  set -- $c
  printf '%s: median us, old %s, new %s\n' "$1" "$(awk '{ print $1 }' "$dir/$1" | median)" "$(awk '{ print $2 }' "$dir/$1" | median)"
  (( layouts > 0 )) || continue
  for s in $(seq "$layouts"); do
    printf '  layout %d: old %s, new %s\n' "$s" "$(awk -v s="$s" '$3 == s { print $1 }' "$dir/$1" | median)" "$(awk -v s="$s" '$3 == s { print $2 }' "$dir/$1" | median)"
  done
done
