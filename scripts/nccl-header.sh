#!/usr/bin/env bash
# Fetches NCCL's real nccl.h (Debian trixie's libnccl-dev 2.22.3, component
# contrib) into $GOCCL_NCCL_HEADERS (default .cuda/nccl-2.22.3, git-ignored)
# and prints the include directory. goccl is built against a header of its
# own (backend/nccl/goccl_nccl.h); scripts/nccl-check.sh compiles
# backend/nccl/abi/abi_check.c against this one to check that they agree.
# Nothing on the machine changes: apt runs with a sources file, lists and
# cache of its own in a scratch directory, pointed at the Debian mirror the
# machine's apt sources name. A second run with the header present
# downloads nothing.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${GOCCL_NCCL_HEADERS:-$repo/.cuda/nccl-2.22.3}
suite=trixie
pkg=libnccl-dev
want=2.22.3

die() { echo "nccl-header: FAILED: $*" >&2; exit 1; }

if [ -f "$dir/.goccl-nccl" ]; then
  echo "$dir/usr/include"; exit 0
fi
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "apt-get and dpkg-deb are needed"

# The first Debian mirror of the machine's apt sources (not -security), in
# the one-line or the deb822 format.
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
  | awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }
         $1 == "URIs:" { print $2; exit }' | grep -v security | head -n1 || true)
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list{,.d}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
key=/usr/share/keyrings/debian-archive-keyring.gpg
signed=; [ -r "$key" ] && signed="[signed-by=$key] "
echo "deb ${signed}$mirror $suite contrib" >"$work/sources.list"
apt=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
     -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1")
apt-get "${apt[@]}" -qq update >"$work/log" 2>&1 || { cat "$work/log" >&2; die "apt-get update of $suite contrib"; }
ver=$(apt-cache "${apt[@]}" policy "$pkg" | awk '/Candidate:/ { print $2 }')
case $ver in "$want"*) ;; *) die "$pkg $want is not in $suite contrib at $mirror (candidate: ${ver:-none})" ;; esac
(cd "$work/debs" && apt-get "${apt[@]}" -qq download "$pkg=$ver") >"$work/log" 2>&1 \
  || { cat "$work/log" >&2; die "apt-get download $pkg=$ver"; }
mkdir -p "$dir"
dpkg-deb --fsys-tarfile "$work"/debs/*.deb | tar -x -C "$dir" ./usr/include/nccl.h
[ -f "$dir/usr/include/nccl.h" ] || die "no usr/include/nccl.h in $pkg"
echo "$pkg $ver" >"$dir/.goccl-nccl"
echo "$dir/usr/include"
