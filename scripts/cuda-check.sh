#!/usr/bin/env bash
# Compiles and checks goccl's GPU code on a machine with no GPU, against the
# headers, link stubs and ptxas that scripts/cuda-sdk.sh fetches:
#
#   1. a build without tags never reaches gorgonia.org/cu (whose init exits
#      the process when there is no driver);
#   2. go vet -tags cuda ./...;
#   3. every package whose files carry the cuda tag builds, and its test
#      binary compiles and links (against the libcuda.so stub);
#   4. ptxas assembles kernels/*.ptx for sm_70, sm_80 and sm_90 with no
#      spills and no local memory, and prints each entry's registers.
#
# Nothing here runs GPU code. The Go checks (1-3) and ptxas (4) both run
# even if the other fails; exit status 0 only if every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "cuda-check: FAILED: $*" >&2; exit 1; }

sdkenv=$(scripts/cuda-sdk.sh env) || fail "no CUDA SDK (scripts/cuda-sdk.sh, above)"
eval "$sdkenv"
export CGO_ENABLED=1

# files lists each package with its files; a package is cuda-tagged when
# -tags cuda changes that list.
files() {
  go list -e "$@" -f '{{.ImportPath}} {{join .GoFiles ","}} {{join .CgoFiles ","}} {{join .TestGoFiles ","}} {{join .XTestGoFiles ","}}' ./...
}

check_go() {
  echo "-- a build without the cuda tag does not reach gorgonia.org/cu"
  cu='^gorgonia\.org/cu(/|$)'
  plain=$(go list -deps -test ./...)
  if grep -Eq "$cu" <<<"$plain"; then
    go list -deps -test -f '{{.ImportPath}}: {{join .Imports " "}}' ./... | grep -E ' gorgonia\.org/cu(/| |$)' >&2 || true
    fail "gorgonia.org/cu is imported without the cuda tag (above: who imports it)"
  fi
  # The check above means something only while the cuda build does use it.
  tagged=$(go list -deps -tags cuda ./...)
  grep -Eq "$cu" <<<"$tagged" \
    || fail "the cuda build no longer imports gorgonia.org/cu: update this check to the new GPU binding"

  echo "-- go vet -tags cuda ./..."
  go vet -tags cuda ./...

  echo "-- packages whose files carry the cuda tag: build and link their tests"
  mapfile -t pkgs < <(comm -13 <(files | sort) <(files -tags cuda | sort) | cut -d' ' -f1)
  [ ${#pkgs[@]} -gt 0 ] || fail "go list finds no package whose files change with -tags cuda"
  go build -tags cuda "${pkgs[@]}"
  for p in "${pkgs[@]}"; do
    echo "   $p"
    go test -tags cuda -c -o /dev/null "$p"
  done
  echo "cuda-check: go ok (${#pkgs[@]} cuda-tagged package(s))"
}

check_ptxas() {
  echo "-- ptxas: kernels/*.ptx for sm_70, sm_80, sm_90"
  command -v ptxas >/dev/null || fail "ptxas is not on PATH"
  ptxas --version | tail -n1
  shopt -s nullglob
  ptx=(kernels/*.ptx)
  [ ${#ptx[@]} -gt 0 ] || fail "no kernels/*.ptx"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  : >"$tmp/props"
  for f in "${ptx[@]}"; do
    entries=$(grep -c '^\.visible \.entry ' "$f" || true)
    for arch in sm_70 sm_80 sm_90; do
      if ! ptxas -arch="$arch" -v -o /dev/null "$f" >"$tmp/log" 2>&1; then
        cat "$tmp/log" >&2
        fail "ptxas -arch=$arch $f"
      fi
      grep -i 'warning' "$tmp/log" >&2 || true
      # One line per entry: arch entry registers stack spill-stores spill-loads lmem smem.
      awk -v arch="$arch" '
        function emit() { if (name != "") print arch, name, regs, stack, sst, sld, lmem, smem; name = "" }
        /Compiling entry function/ {
          emit(); name = $0; sub(/.*function \047/, "", name); sub(/\047.*/, "", name)
          regs = "?"; stack = sst = sld = lmem = smem = 0
        }
        /bytes stack frame/ {
          for (i = 2; i <= NF; i++) {
            if ($i ~ /^stack/) stack = $(i-2)
            if ($i ~ /^stores/) sst = $(i-3)
            if ($i ~ /^loads/) sld = $(i-3)
          }
        }
        /Used [0-9]+ registers/ {
          for (i = 1; i <= NF; i++) {
            if ($i ~ /^registers/) regs = $(i-1)
            if ($i ~ /^lmem/) lmem = $(i-2)
            if ($i ~ /^smem/) smem = $(i-2)
          }
        }
        END { emit() }' "$tmp/log" | sort -k2,2 >"$tmp/one"
      got=$(wc -l <"$tmp/one")
      [ "$got" -eq "$entries" ] \
        || fail "ptxas -v -arch=$arch $f reported $got entries, the file has $entries: has the -v format changed?"
      cat "$tmp/one" >>"$tmp/props"
    done
  done

  bad=$(awk '$3 == "?" || $4 > 0 || $5 > 0 || $6 > 0 || $7 > 0' "$tmp/props")
  if [ -n "$bad" ]; then
    echo "arch entry registers stack spill-stores spill-loads lmem smem" >&2
    echo "$bad" >&2
    fail "ptxas reports spills, local memory or no register count (above)"
  fi

  echo
  echo "registers per thread, from ptxas -v"
  awk '
    { regs[$2 SUBSEP $1] = $3; if ($1 == "sm_80") smem[$2] = $8
      if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
    END {
      w = 5; for (i = 1; i <= n; i++) if (length(order[i]) > w) w = length(order[i])
      printf "%-" w "s  %5s  %5s  %5s  %10s\n", "entry", "sm_70", "sm_80", "sm_90", "smem sm_80"
      for (i = 1; i <= n; i++) {
        e = order[i]
        printf "%-" w "s  %5s  %5s  %5s  %10s\n", e, regs[e, "sm_70"], regs[e, "sm_80"], regs[e, "sm_90"], smem[e]
      }
    }' "$tmp/props"
  echo "cuda-check: ptxas ok (${#ptx[@]} PTX file(s), no spills, no local memory)"
}

# Each check runs in a subshell with -e, so a failure ends that check only.
set +e
(set -e; check_go); go_rc=$?
(set -e; check_ptxas); ptxas_rc=$?
set -e
[ $go_rc -eq 0 ] || echo "cuda-check: FAILED: the Go checks (above)" >&2
[ $ptxas_rc -eq 0 ] || echo "cuda-check: FAILED: the ptxas checks (above)" >&2
if [ $go_rc -ne 0 ] || [ $ptxas_rc -ne 0 ]; then exit 1; fi
echo "cuda-check: ok"
