#!/usr/bin/env bash
# The MPI backend (backend/mpi, build tag mpi; issue 36) against both of
# Debian's MPIs, one after the other:
#   - Open MPI: tag mpi (pkg-config ompi-c), launched by mpirun.openmpi;
#   - MPICH: tags mpi,mpich (pkg-config mpich), launched by mpiexec.mpich
#     (Hydra, with its fork launcher: one machine, no ssh).
# Each is installed where missing (libopenmpi-dev openmpi-bin, libmpich-dev
# mpich; as .ci/launchers.sh installs packages; needs root then). Installing
# MPICH leaves mpirun and mpicc to Open MPI (Debian ranks it higher; if the
# alternatives moved anyway they are set back, since the rest of CI calls
# plain mpirun), and this script names each launcher explicitly, so either
# way it runs what it means to. For each MPI it vets and builds the tags and
# runs backend/mpi's tests under that MPI's launcher:
#   - the collective suite against the host reference at -np 2 and -np 4,
#     and at -np 2 with every MPI call on one locked thread
#     (GOCCL_MPI_THREAD=serialized); the test log must name the library
#     it was meant to run on (a binary linked to the other MPI would not);
#   - GOCCL_MPI_CHECK=deadline: the last rank sleeps, the others' call
#     fails at its deadline with ErrTimeout naming it;
#   - GOCCL_MPI_CHECK=mismatch: rank 1 broadcasts where the others
#     allreduce, and rank 0's error is ErrMismatch naming both calls.
# Those two run with polled calls (GOCCL_MPI_WAIT=poll), where the call
# returns the error, and with blocking calls (the default), where the
# watchdog reports it ("goccl: ... ending the job") and aborts the job.
# The last two end the job with MPI_Abort, as a failed MPI job must end:
# their exit status is not checked, rank 0's "MPI-CHECK ok" line is.
# Each launch is bounded by MPI_CHECK_TIMEOUT seconds (default 40).
#
#   bash scripts/mpi-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${MPI_CHECK_TIMEOUT:-40}

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check NAME TAGS LIBRARY LAUNCHER...: the stages above for one MPI.
# LIBRARY starts the test log's "MPI library:" line (MPI_Get_library_version).
check() {
  local name=$1 tags=$2 lib=$3; shift 3
  local launcher=("$@") bin="$tmp/$name.test"
  go vet -tags "$tags" ./backend/...
  go build -tags "$tags" ./...
  go test -tags "$tags" -c -o "$bin" ./backend/mpi

  run() { # np, then env assignments
    # A check's ranks write to files of their own (GOCCL_MPI_CHECK_DIR,
    # TestMain's checkLog): the job ends in MPI_Abort, and MPICH's Hydra
    # exits on it before it has forwarded what the ranks wrote. Their
    # files follow the launcher's output.
    local np=$1; shift
    rm -rf "$tmp/logs" && mkdir "$tmp/logs"
    local rc=0
    env GOCCL_MPI_CHECK_DIR="$tmp/logs" "$@" timeout "$limit" "${launcher[@]}" -np "$np" "$bin" -test.count=1 -test.v 2>&1 || rc=$?
    cat "$tmp/logs"/*.log 2>/dev/null || true
    return $rc
  }
  local np check
  for np in 2 4; do
    echo "== mpi-check $name: suite, -np $np"
    run "$np" GOCCL_MPI_THREAD= GOCCL_MPI_CHECK= >"$tmp/out" || { cat "$tmp/out"; echo "mpi-check: $name: suite failed at -np $np" >&2; exit 1; }
    grep -q "MPI library: $lib" "$tmp/out" || { grep 'MPI library' "$tmp/out"; echo "mpi-check: $name: the suite did not run on $lib" >&2; exit 1; }
    if [ "$np" = 2 ]; then
      grep -m1 -o 'MPI library: .*' "$tmp/out"
      grep -m1 -o 'MPI reductions on .*' "$tmp/out" || true
    fi
    grep -c '^PASS$' "$tmp/out" | sed 's/$/ ranks passed/'
  done
  echo "== mpi-check $name: suite, -np 2, every MPI call on one locked thread"
  run 2 GOCCL_MPI_THREAD=serialized GOCCL_MPI_CHECK= >"$tmp/out" || { cat "$tmp/out"; echo "mpi-check: $name: serialized suite failed" >&2; exit 1; }
  grep -c '^PASS$' "$tmp/out" | sed 's/$/ ranks passed/'

  for check in deadline mismatch; do
    for np in 2 4; do
      echo "== mpi-check $name: $check, -np $np, polled calls (GOCCL_MPI_WAIT=poll)"
      run "$np" GOCCL_MPI_THREAD= GOCCL_MPI_WAIT=poll GOCCL_MPI_CHECK=$check >"$tmp/out" || true
      grep '^rank \|MPI-CHECK' "$tmp/out" || true
      grep -q "MPI-CHECK ok $check" "$tmp/out" || { cat "$tmp/out"; echo "mpi-check: $name: $check at -np $np not named" >&2; exit 1; }
      # Blocking calls (the default): a call blocked in MPI cannot return
      # its error; the watchdog reports it and ends the job. A mismatch
      # may also come back from MPI first, and then fail as polled.
      echo "== mpi-check $name: $check, -np $np, blocking calls"
      run "$np" GOCCL_MPI_THREAD= GOCCL_MPI_WAIT= GOCCL_MPI_CHECK=$check >"$tmp/out" || true
      grep '^goccl: \|MPI-CHECK' "$tmp/out" | cut -c1-300 || true
      if [ "$check" = deadline ]; then
        grep -q "rank $((np - 1)) is behind.*ending the job" "$tmp/out"
      else
        grep -q "MPI-CHECK ok mismatch\|calls differ: .*broadcast.*ending the job" "$tmp/out"
      fi || { cat "$tmp/out"; echo "mpi-check: $name: $check at -np $np, blocking: not named" >&2; exit 1; }
    done
  done
}

if ! command -v mpirun.openmpi >/dev/null 2>&1 || ! pkg-config --exists ompi-c 2>/dev/null; then
  echo "mpi-check: installing libopenmpi-dev openmpi-bin"
  apt_install libopenmpi-dev openmpi-bin
fi
mpirun.openmpi --version | head -n1
check openmpi mpi "Open MPI" mpirun.openmpi --allow-run-as-root --oversubscribe -x GOCCL_MPI_THREAD -x GOCCL_MPI_CHECK -x GOCCL_MPI_WAIT -x GOCCL_MPI_CHECK_DIR

if ! command -v mpiexec.mpich >/dev/null 2>&1 || ! pkg-config --exists mpich 2>/dev/null; then
  echo "mpi-check: installing libmpich-dev mpich"
  apt_install libmpich-dev mpich
  for alt in mpirun:/usr/bin/mpirun.openmpi mpi:/usr/bin/mpicc.openmpi; do
    if [ -e "${alt#*:}" ] && [ "$(update-alternatives --query "${alt%%:*}" 2>/dev/null | sed -n 's/^Value: //p')" != "${alt#*:}" ]; then
      echo "mpi-check: ${alt%%:*} was taken by MPICH; back to Open MPI"
      update-alternatives --set "${alt%%:*}" "${alt#*:}" >/dev/null
    fi
  done
fi
mpiexec.mpich --version | sed -n 's/^ *Version: *//p' | sed 's/^/MPICH (Hydra) /'
# Hydra passes the whole environment on by default.
check mpich mpi,mpich "MPICH" mpiexec.mpich -launcher fork
echo "mpi-check: ok"
