#!/usr/bin/env bash
# Issue 34: every stall ends within timeout + grace, on every transport.
# Four ranks under `goccl run -n 4` loop over one collective; rank 1 is
# frozen with SIGSTOP from outside; every survivor's failing call must
# return within the timeout + grace (WithTimeout: timeout/10 clamped to
# [100ms, 1s]) + 300 ms of slack (stall_test.go, stallSlack), with a
# goccl error naming the stopped rank or saying aborted. Each op
# (allreduce, broadcast, all-to-all, barrier, send/recv) runs REPS times
# over each transport (shm, tcp). One line per survivor, then a summary
# (the largest elapsed time per op and transport against the bound);
# exits non-zero on any violation. CI runs one repetition with a 1 s
# timeout (TestStallBound).
#
#   bash scripts/stall.sh                      # REPS=10, TIMEOUT=5s
#   REPS=3 TIMEOUT=1s OPS=allreduce,sendrecv TRANSPORTS=shm bash scripts/stall.sh
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-10}
timeout=${TIMEOUT:-5s}
export GOCCL_STALL_REPS=$reps GOCCL_STALL_TIMEOUT=$timeout
export GOCCL_STALL_OPS=${OPS:-allreduce,broadcast,alltoall,barrier,sendrecv}
export GOCCL_STALL_TRANSPORTS=${TRANSPORTS:-shm,tcp}
echo "== $reps repetitions, timeout $timeout, ops $GOCCL_STALL_OPS, transports $GOCCL_STALL_TRANSPORTS"
# -v so that the lines come as they are printed; only ours are shown.
set +e
go test -v -count=1 -timeout 120m -run '^TestStallBound$' . | grep --line-buffered -E '^(STALL|--- |FAIL|ok )'
rc=${PIPESTATUS[0]}
set -e
exit "$rc"
