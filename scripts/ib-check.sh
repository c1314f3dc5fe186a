#!/bin/sh
# ib-check: compile transport/ib's libibverbs provider (build tag ibverbs),
# and the root package and goccl that select it, without RDMA hardware.
# Installs libibverbs-dev when its header is missing, then vets the
# packages and compiles transport/ib's test binary with the tag. Nothing
# runs against a device: the tests themselves run over the fake provider
# in the ordinary `go test`.
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
# Init and goccl bench select the transport (GOCCL_TRANSPORT=ib, -transport
# ib): they must build with the provider too.
echo "ib-check: go vet -tags ibverbs . ./cmd/goccl" >&2
go vet -tags ibverbs . ./cmd/goccl
echo "ib-check: go build -tags ibverbs ./cmd/goccl" >&2
go build -tags ibverbs -o /dev/null ./cmd/goccl
echo "ib-check: ok" >&2
