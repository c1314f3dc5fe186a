#!/usr/bin/env bash
# Small messages when ranks outnumber cores (issue 37): N ranks (default 4)
# on this host, more than its cores, allreduce float32 sum, loop-average
# time, goccl over TCP and over shared memory beside Open MPI over tcp and
# vader run with mpi_yield_when_idle (as Open MPI is run where ranks share
# cores), in alternated rounds; prints per path and size the median and
# range over the rounds, in us. OLD=REV adds goccl built at REV.
#
#   bash scripts/oversub.sh [rounds]        (default 5)
#   OLD=80624cc N=4 SIZES="8 64K 1M" bash scripts/oversub.sh 5
#
# Needs mpicc and mpirun (openmpi-bin, libopenmpi-dev); runs as root with
# Open MPI's root override.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
n=${N:-4}
sizes=${SIZES:-8 64K 1M}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/quiet.sh

go build -o "$tmp/goccl-new" ./cmd/goccl
builds=(new)
if [ -n "${OLD:-}" ]; then
  git worktree add --detach "$tmp/old" "$OLD" >/dev/null 2>&1
  (cd "$tmp/old" && go build -o "$tmp/goccl-old" ./cmd/goccl)
  builds=(old new)
fi
# The C loop of scripts/vs-mpi.sh: warm-up, a barrier, iters calls timed.
awk '/^cat > "\$tmp\/allreduce.c" <<.C.$/{f=1;next} /^C$/{f=0} f' scripts/vs-mpi.sh > "$tmp/allreduce.c"
mpicc -O2 -o "$tmp/allreduce" "$tmp/allreduce.c"

bytes() { numfmt --from=iec "$1"; }
iters() { # fewer for larger messages: about 0.3 s a run here
  local b; b=$(bytes "$1")
  if (( b <= 4096 )); then echo 5000; elif (( b <= 262144 )); then echo 1000; else echo 100; fi
}
goccl() { # build transport size
  quiet
  "$tmp/goccl-$1" bench -q -transport "$2" -n "$n" -op allreduce -b "$3" -e "$3" -iters "$(iters "$3")" \
    -w $(( $(iters "$3") / 10 )) -format json 2>/dev/null | sed -n 's/.*"time_us": \([0-9.]*\).*/\1/p'
}
mpi() { # btl size
  quiet
  mpirun --oversubscribe -np "$n" --mca btl "self,$1" --mca mpi_yield_when_idle 1 \
    "$tmp/allreduce" "$(bytes "$2")" "$(iters "$2")" $(( $(iters "$2") / 10 )) 2>/dev/null | tail -n1
}
: > "$tmp/all"
for r in $(seq "$rounds"); do
  for s in $sizes; do
    paths=()
    for b in "${builds[@]}"; do paths+=("goccl-$b-tcp" "goccl-$b-shm"); done
    paths+=(ompi-tcp ompi-vader)
    (( r % 2 )) || paths=($(printf '%s\n' "${paths[@]}" | tac))
    for p in "${paths[@]}"; do
      case $p in
        goccl-*) b=${p#goccl-}; t=$(goccl "${b%-*}" "${b#*-}" "$s") ;;
        ompi-*) t=$(mpi "${p#ompi-}" "$s") ;;
      esac
      echo "$p $s $t" | tee -a "$tmp/all"
    done
  done
done
echo "# $n ranks on $(nproc) cores, allreduce float32 sum, us: median (min-max) of $rounds rounds"
for s in $sizes; do
  awk -v s="$s" '$2 == s { print $1, $3 }' "$tmp/all" | sort -k1,1 -k2,2n |
    awk -v s="$s" '{ v[$1] = v[$1] " " $2 } END { for (p in v) { k = split(v[p], a, " "); m = (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2; printf "%-16s %6s  %8.1f (%.1f-%.1f)\n", p, s, m, a[1], a[k] } }' | sort
done
