#!/usr/bin/env bash
# How Init and an idle job grow with the number of ranks, on this machine:
# N processes of cmd/goccl-scale under `goccl run -n N`, each doing Init,
# 20 allreduces of 8 B, one of 1 MiB and an allgather over TCP. One line
# per N: the slowest rank's Init, the descriptors, goroutines and RSS of
# rank 0 (which hosts the store) and the most of any other rank, and the
# requests the store served. BENCHMARKS.md ("Scale") has the table.
#
#   bash scripts/scale.sh                   # N = 2 4 8 16 32 64, lazy links
#   NS="128 256 512" bash scripts/scale.sh  # big jobs: minutes on 2 cores
#   CONNECT=eager bash scripts/scale.sh     # every pair linked at Init
set -euo pipefail
cd "$(dirname "$0")/.."
ns=${NS:-2 4 8 16 32 64}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/goccl" ./cmd/goccl
go build -o "$bin/goccl-scale" ./cmd/goccl-scale
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "connect=${CONNECT:-lazy} transport=tcp"
for n in $ns; do
	out=$(GOCCL_TRANSPORT=tcp GOCCL_CONNECT="${CONNECT:-lazy}" GOCCL_EXTERNAL_STORE=1 \
		"$bin/goccl" run -n "$n" -- "$bin/goccl-scale" 2>&1) || { echo "n=$n failed:"; echo "$out" | tail -20; exit 1; }
	echo "$out" | grep -o 'SCALE .*'
done
