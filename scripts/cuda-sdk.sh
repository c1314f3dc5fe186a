#!/usr/bin/env bash
# Fetches what compiling goccl's cuda-tagged code needs, on a machine with no
# GPU and no CUDA install: cuda.h, the libcuda.so link stub and ptxas, from
# Debian's nvidia-cuda-dev and nvidia-cuda-toolkit 11.8 (component non-free).
#
#   scripts/cuda-sdk.sh            fetch if missing, print the environment to use
#   eval "$(scripts/cuda-sdk.sh env)"   the same, as export lines for the shell
#
# The files land in $GOCCL_CUDA_SDK (default: .cuda/sdk-11.8 in the repo,
# git-ignored). Nothing on the machine changes: apt runs with a sources file,
# package lists and cache of its own, in a scratch directory beside the SDK,
# pointed at the Debian mirror the machine's apt sources already name. A
# second run with the SDK present downloads nothing.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
sdk=${GOCCL_CUDA_SDK:-$repo/.cuda/sdk-11.8}
suite=bookworm        # the Debian release whose non-free ships CUDA 11.8
want_version=11.8     # upstream version the packages must carry
stamp=.goccl-sdk      # written last: its presence means the SDK is complete

mode=${1:-show}
case $mode in
  show|env) ;;
  *) echo "usage: $0 [env]" >&2; exit 2 ;;
esac

log() { echo "cuda-sdk: $*" >&2; }
die() { echo "cuda-sdk: FAILED: $*" >&2; exit 1; }

# debian_mirror prints the first http(s) URI of the machine's apt sources that
# serves $suite (not -security), in either the one-line or the deb822 format.
debian_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk -v suite="$suite" '
      $1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i+1) == suite) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    # deb822: stanzas separated by blank lines; keep the URI of a stanza whose
    # Suites name $suite exactly.
    awk -v suite="$suite" '
      function flush() {
        if (uri != "" && types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ")) { print uri; found = 1 }
        uri = ""; suites = ""; types = ""
      }
      /^[ \t]*$/ { flush(); if (found) exit; next }
      /^#/ { next }
      tolower($1) == "uris:"   { uri = $2 }
      tolower($1) == "suites:" { $1 = ""; suites = $0; sub(/^ +/, "", suites) }
      tolower($1) == "types:"  { $1 = ""; types = $0 }
      END { if (!found) flush() }' "$f"
  done
}

fetch() {
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
    || die "apt-get and dpkg-deb are needed (a Debian or Ubuntu machine)"
  local mirror
  mirror=$(debian_mirror)
  mirror=${mirror%%$'\n'*}
  [ -n "$mirror" ] || die "no apt source for '$suite' in /etc/apt/sources.list{,.d}; cannot tell which Debian mirror to use"

  mkdir -p "$(dirname "$sdk")"
  local work
  work=$(mktemp -d "$sdk.work.XXXXXX")
  # shellcheck disable=SC2064 # expand $work now
  trap "rm -rf '$work'" EXIT
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"

  local signed="" keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -r "$keyring" ] && signed="[signed-by=$keyring] "
  echo "deb ${signed}$mirror $suite contrib non-free" >"$work/sources.list"

  # Every path apt writes is ours; the machine's status file is only read.
  local apt=(
    -o "Dir::Etc::SourceList=$work/sources.list"
    -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache=$work/cache"
    -o "Dir::Cache::archives=$work/cache/archives"
    -o Acquire::Languages=none
    -o APT::Sandbox::User=root
  )
  [ "$(id -u)" = 0 ] || apt+=(-o Debug::NoLocking=1)

  log "apt-get update: $suite contrib non-free from $mirror"
  apt-get "${apt[@]}" -qq update >"$work/update.log" 2>&1 \
    || { cat "$work/update.log" >&2; die "apt-get update of the private non-free source failed"; }
  # apt-get update exits 0 when a source cannot be reached; the index tells.
  compgen -G "$work/lists/*_non-free_*Packages*" >/dev/null \
    || { cat "$work/update.log" >&2; die "apt-get update got no non-free package index from $mirror (network? mirror?)"; }

  local pkg ver
  for pkg in nvidia-cuda-dev nvidia-cuda-toolkit; do
    ver=$({ apt-cache "${apt[@]}" show --no-all-versions "$pkg" 2>/dev/null || true; } | awk '$1 == "Version:" && v == "" { v = $2 } END { print v }')
    [ -n "$ver" ] || die "$pkg is not in $suite non-free at $mirror"
    case $ver in
      "$want_version".*|*:"$want_version".*|*"~$want_version".*) ;;
      *) die "$pkg is version $ver, want $want_version.x (the SDK directory is named for it)" ;;
    esac
    log "apt-get download $pkg=$ver"
    (cd "$work/debs" && apt-get "${apt[@]}" -qq download "$pkg=$ver") >"$work/download.log" 2>&1 \
      || { cat "$work/download.log" >&2; die "apt-get download $pkg failed"; }
  done

  log "extracting headers, link stubs and ptxas"
  dpkg-deb --fsys-tarfile "$work"/debs/nvidia-cuda-dev_*.deb \
    | tar -x -C "$work/root" --wildcards './usr/include/*' './usr/lib/x86_64-linux-gnu/stubs/*' \
      './usr/share/doc/nvidia-cuda-dev/copyright' \
    || die "extracting nvidia-cuda-dev"
  rm -f "$work"/debs/nvidia-cuda-dev_*.deb
  dpkg-deb --fsys-tarfile "$work"/debs/nvidia-cuda-toolkit_*.deb \
    | tar -x -C "$work/root" --wildcards './usr/bin/ptxas' './usr/share/doc/nvidia-cuda-toolkit/copyright' \
    || die "extracting ptxas from nvidia-cuda-toolkit"
  rm -f "$work"/debs/nvidia-cuda-toolkit_*.deb

  [ -r "$work/root/usr/include/cuda.h" ] || die "nvidia-cuda-dev holds no usr/include/cuda.h"
  [ -e "$work/root/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" ] || die "nvidia-cuda-dev holds no stubs/libcuda.so"
  "$work/root/usr/bin/ptxas" --version >/dev/null 2>&1 \
    || die "ptxas does not run: $(ldd "$work/root/usr/bin/ptxas" 2>&1 | grep 'not found' | tr '\n' ' ')"

  {
    echo "nvidia-cuda-dev and nvidia-cuda-toolkit $ver, $suite non-free"
    echo "fetched $(date -u +%FT%TZ)"
  } >"$work/root/$stamp"

  # Publish in one rename, so a reader never sees half an SDK.
  mv -T "$work/root" "$sdk" 2>/dev/null \
    || die "cannot create $sdk: it exists without $stamp (an interrupted or foreign directory?); remove it and run again"
  log "SDK ready in $sdk ($(du -sh "$sdk" | cut -f1))"
}

if [ ! -f "$sdk/$stamp" ]; then
  fetch
fi

cflags="-I$repo/device/cuda/compat -I$sdk/usr/include"
ldflags="-L$sdk/usr/lib/x86_64-linux-gnu/stubs"
case $mode in
  env)
    printf 'export CGO_CFLAGS=%q\n' "$cflags"
    printf 'export CGO_LDFLAGS=%q\n' "$ldflags"
    printf 'export PATH=%q:"$PATH"\n' "$sdk/usr/bin"
    ;;
  show)
    echo "CUDA SDK: $sdk ($(head -n1 "$sdk/$stamp"))"
    echo "CGO_CFLAGS=\"$cflags\""
    echo "CGO_LDFLAGS=\"$ldflags\""
    echo "PATH=\"$sdk/usr/bin:\$PATH\"   # ptxas"
    echo "in a shell: eval \"\$(scripts/cuda-sdk.sh env)\""
    ;;
esac
