#!/bin/sh
# ib-check: compile transport/ib's libibverbs provider (build tag ibverbs)
# without RDMA hardware. Installs libibverbs-dev when its header is
# missing, then vets the package and compiles its test binary with the
# tag. Nothing runs against a device: the tests themselves run over the
# fake provider in the ordinary `go test`.
set -eu
cd "$(dirname "$0")/.."

if [ ! -f /usr/include/infiniband/verbs.h ]; then
	echo "ib-check: installing libibverbs-dev" >&2
	if [ "$(id -u)" -eq 0 ]; then
		apt-get update -qq && apt-get install -y -qq libibverbs-dev
	else
		sudo apt-get update -qq && sudo apt-get install -y -qq libibverbs-dev
	fi
fi

export CGO_ENABLED=1
echo "ib-check: go vet -tags ibverbs ./transport/ib/" >&2
go vet -tags ibverbs ./transport/ib/
echo "ib-check: go test -tags ibverbs -c ./transport/ib/" >&2
go test -tags ibverbs -c -o /dev/null ./transport/ib/
echo "ib-check: ok" >&2
