#!/usr/bin/env bash
# The MPI backend (backend/mpi, build tag mpi; issue 36) against Open MPI:
# installs libopenmpi-dev and openmpi-bin where mpicc or ompi-c is missing
# (as .ci/launchers.sh installs packages; needs root then), vets and
# builds the tag, and runs backend/mpi's tests under mpirun:
#   - the collective suite against the host reference at -np 2 and -np 4,
#     and at -np 2 with every MPI call on one locked thread
#     (GOCCL_MPI_THREAD=serialized);
#   - GOCCL_MPI_CHECK=deadline: the last rank sleeps, the others' call
#     fails at its deadline with ErrTimeout naming it;
#   - GOCCL_MPI_CHECK=mismatch: rank 1 broadcasts where the others
#     allreduce, and rank 0's error is ErrMismatch naming both calls.
# The last two end the job with MPI_Abort, as a failed MPI job must end:
# their exit status is not checked, rank 0's "MPI-CHECK ok" line is.
# Each mpirun is bounded by MPI_CHECK_TIMEOUT seconds (default 40).
#
#   bash scripts/mpi-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${MPI_CHECK_TIMEOUT:-40}

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
}
if ! command -v mpirun >/dev/null 2>&1 || ! pkg-config --exists ompi-c 2>/dev/null; then
  echo "mpi-check: installing libopenmpi-dev openmpi-bin"
  apt_install libopenmpi-dev openmpi-bin
fi
mpirun --version | head -n1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go vet -tags mpi ./backend/...
go build -tags mpi ./...
go test -tags mpi -c -o "$tmp/mpi.test" ./backend/mpi

run() { # np, then env assignments
  local np=$1; shift
  env "$@" timeout "$limit" mpirun --allow-run-as-root --oversubscribe -x GOCCL_MPI_THREAD -x GOCCL_MPI_CHECK \
    -np "$np" "$tmp/mpi.test" -test.count=1 2>&1
}

for np in 2 4; do
  echo "== mpi-check: suite, -np $np"
  run "$np" GOCCL_MPI_THREAD= GOCCL_MPI_CHECK= >"$tmp/out" || { cat "$tmp/out"; echo "mpi-check: suite failed at -np $np" >&2; exit 1; }
  grep -c '^PASS$' "$tmp/out" | sed 's/$/ ranks passed/'
done
echo "== mpi-check: suite, -np 2, every MPI call on one locked thread"
run 2 GOCCL_MPI_THREAD=serialized GOCCL_MPI_CHECK= >"$tmp/out" || { cat "$tmp/out"; echo "mpi-check: serialized suite failed" >&2; exit 1; }

for check in deadline mismatch; do
  for np in 2 4; do
    echo "== mpi-check: $check, -np $np"
    run "$np" GOCCL_MPI_THREAD= GOCCL_MPI_CHECK=$check >"$tmp/out" || true
    grep '^rank \|MPI-CHECK' "$tmp/out" || true
    grep -q "MPI-CHECK ok $check" "$tmp/out" || { cat "$tmp/out"; echo "mpi-check: $check at -np $np not named" >&2; exit 1; }
  done
done
echo "mpi-check: ok"
