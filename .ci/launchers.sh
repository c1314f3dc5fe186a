#!/usr/bin/env bash
# CI: run the examples under real launchers (srun, sbatch, mpirun, salloc +
# mpirun) and across network namespaces. Installs Open MPI and iproute2 if
# missing and starts a one-node Slurm cluster with ../shared/slurm/up.sh
# (relative to the repository root; SLURM_SCRIPTS overrides the directory),
# stopping it again on exit. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
}

echo "== launchers: tools"
command -v mpirun >/dev/null 2>&1 || { echo "installing openmpi-bin"; apt_install openmpi-bin; }
command -v ip >/dev/null 2>&1 || { echo "installing iproute2"; apt_install iproute2; }
mpirun --version | head -n1

slurm="${SLURM_SCRIPTS:-../shared/slurm}"
if [ -x "$slurm/up.sh" ]; then
  echo "== launchers: starting Slurm ($slurm/up.sh)"
  trap '"$slurm/down.sh" || true' EXIT
  "$slurm/up.sh"
elif [ "${GOCCL_SKIP_SLURM:-}" = 1 ]; then
  echo "== launchers: no $slurm/up.sh; GOCCL_SKIP_SLURM=1, so the srun and sbatch tests will skip"
else
  echo "no $slurm/up.sh to start Slurm with (set SLURM_SCRIPTS, or GOCCL_SKIP_SLURM=1 to skip)" >&2
  exit 1
fi

echo "== launchers: tests"
GOCCL_TEST_LAUNCHERS=1 go test -run 'TestSrun|TestSbatch|TestMpirun|TestNetns|TestExamples' -count=1 -timeout 10m -v . \
  | grep -v 'tcp: link to peer lost'
