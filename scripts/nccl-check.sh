#!/usr/bin/env bash
# Runs backend/nccl's tests on a machine with no GPU and no NCCL: goccl's
# collectives on device memory over the NCCL backend, ranks as processes
# on one host, against a host reference, with the fake NCCL
# (backend/nccl/fakenccl) and the fake CUDA (device/cuda/compat/fakecuda)
# built here, over the CUDA headers scripts/cuda-sdk.sh fetches. The
# library is loaded at run time as on a GPU machine: GOCCL_NCCL_LIB names
# the fake. goccl's own NCCL header is first compiled against NCCL's real
# nccl.h (scripts/nccl-header.sh). The device suites of goccl's own path
# (the root package's TestDeviceAllReduceMatchesHost and
# TestDeviceCollectivesMatchHost) then run again on the NCCL backend, as
# their subtests "nccl" (device_nccl_test.go). Nothing here says anything
# about NCCL's own speed or correctness, only that goccl drives its API as
# documented.
#
#   scripts/nccl-check.sh            the tests (go test flags may follow: -run, -v)
set -euo pipefail
cd "$(dirname "$0")/.."

sdkenv=$(scripts/cuda-sdk.sh env) || { echo "nccl-check: FAILED: no CUDA SDK (scripts/cuda-sdk.sh)" >&2; exit 1; }
eval "$sdkenv"
export CGO_ENABLED=1
sdk=${GOCCL_CUDA_SDK:-$PWD/.cuda/sdk-11.8}
out=$PWD/.cuda/fakenccl
mkdir -p "$out"

echo "-- the fake CUDA and the fake NCCL"
gcc -O1 -Wall -shared -fPIC -o "$out/libcuda.so.1" device/cuda/compat/fakecuda/fakecuda.c -lpthread -lm
gcc -O1 -Wall -Wextra -Wno-unused-parameter -shared -fPIC -o "$out/libnccl.so.2" backend/nccl/fakenccl/fakenccl.c -lpthread -ldl -lrt

echo "-- a build with -tags cuda needs no nccl.h, and nothing without it loads NCCL"
if go list -deps ./... | grep -q '^gorgonia\.org/cu'; then
  echo "nccl-check: FAILED: gorgonia.org/cu is imported without the cuda tag" >&2; exit 1
fi
go vet -tags cuda ./backend/...

echo "-- goccl's NCCL header agrees with NCCL's nccl.h (libnccl-dev 2.22.3): values, sizes, entry points"
if inc=$(scripts/nccl-header.sh); then
  gcc -Wall -Werror -fsyntax-only -I"$inc" -I"$sdk/usr/include" backend/nccl/abi/abi_check.c
elif [ "${CI:-}" = true ]; then
  echo "nccl-check: FAILED: nccl-header.sh with CI=true" >&2; exit 1
else
  echo "SKIPPED: no nccl.h (nccl-header.sh, above): the header was NOT checked against NCCL's"
fi

export CGO_CFLAGS="-I$PWD/device/cuda/compat -I$sdk/usr/include"
export CGO_LDFLAGS="-L$sdk/usr/lib/x86_64-linux-gnu/stubs"
go test -tags cuda -c -o "$out/nccl.test" ./backend/nccl
go test -tags cuda -c -o "$out/goccl.test" .
go build -tags cuda -o "$out/goccl" ./cmd/goccl # for bench -device cuda and trace analyze (backend/nccl's tools_test.go)

echo "-- backend/nccl's tests over the fakes (2 and 3 ranks as processes)"
(cd backend/nccl &&
  LD_LIBRARY_PATH=$out GOCCL_NCCL_LIB=$out/libnccl.so.2 GOCCL_BIN=$out/goccl timeout 100 "$out/nccl.test" -test.count 1 -test.timeout 90s "$@")

echo "-- the device suites of goccl's own path, again on the NCCL backend (ranks as goroutines)"
LD_LIBRARY_PATH=$out GOCCL_NCCL_LIB=$out/libnccl.so.2 timeout 100 "$out/goccl.test" -test.count 1 -test.timeout 90s -test.v \
  -test.run '^TestDevice(AllReduceMatchesHost|CollectivesMatchHost)$/^nccl$' >"$out/suites.log" 2>&1 ||
  { grep -v -e '^=== RUN' -e '--- PASS' "$out/suites.log" | tail -40; echo "nccl-check: FAILED: the device suites on NCCL" >&2; exit 1; }
for t in TestDeviceAllReduceMatchesHost TestDeviceCollectivesMatchHost; do # a filter that matched nothing would pass
  grep -q -- "--- PASS: $t/nccl " "$out/suites.log" || { echo "nccl-check: FAILED: $t's nccl cases did not run" >&2; exit 1; }
done
echo "$(grep -c -- '--- PASS: .*/nccl/' "$out/suites.log") cases passed on NCCL"
echo "nccl-check: ok"
