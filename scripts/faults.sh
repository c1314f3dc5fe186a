#!/usr/bin/env bash
# The error guarantees of README's Errors section, asserted on every run
# of many: kills, mismatches and skipped calls, in and between processes.
# Not part of CI (which runs each test once); run it after touching
# blame.go, verdict.go, leave.go, fingerprint.go or a transport.
#
#   bash scripts/faults.sh        # 50 repetitions
#   REPS=200 bash scripts/faults.sh
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-50}
tests='^(TestKillRankTCP|TestMismatchIsCaught|TestSkippedCallTCP|TestSkippedIdenticalCall|TestFrameFaultsTCP)$'
echo "== $reps repetitions of $tests"
go test -count="$reps" -run "$tests" -timeout 60m .
echo "== the same under the race detector, $((reps / 5)) repetitions"
go test -race -count="$((reps / 5))" -run "$tests" -timeout 60m .
