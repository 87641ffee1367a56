#!/usr/bin/env bash
# ci.sh -- prove the ibverbs backend on a real verbs stack in every CI run.
#
# Builds the ibverbs backend's test binary on the host (cgo, -tags ibverbs)
# and runs it inside a throw-away qemu VM with Soft-RoCE (rdma_rxe, see
# run-in-vm.sh) with RDMAMGR_REQUIRE_IBVERBS=1, so that a missing device
# fails the run instead of skipping the tests. Then managers-guest.sh runs
# the rdmamgr binary (-tags ibverbs) there: two managers over ibverbs, and
# two host agents (--host-id A, B) with a process each, bytes verified
# through both agents and their route on ibverbs (RDMAMGR_AGENT_BACKEND in
# SOFTROCE_ENV: tcp, or tcp,ibverbs). Exits with the tests' status, else
# the scenarios' failures.
#
# Usage: test/softroce/ci.sh [-v] [extra test flags, e.g. -test.run=TestConformance]
#   -v  also stream the VM console (kernel + init log) to stderr
#
# Environment: everything run-in-vm.sh reads (SOFTROCE_CACHE, SOFTROCE_TIMEOUT,
# SOFTROCE_MEM, ...); GO (the go command, default: go on PATH);
# RDMAMGR_RACE=1 builds the test binary with the race detector.
# Needs root for apt-get on first use (Debian bookworm host).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
VMFLAGS=()
if [ "${1:-}" = "-v" ]; then VMFLAGS+=(-v); shift; fi
GO=${GO:-go}

t_start=$(date +%s.%N)
declare -a STEPS=()
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
step() {  # step NAME COMMAND...: run, time and record it
  local name=$1 t0 rc=0; shift
  echo "ci: == $name" >&2
  t0=$(date +%s.%N)
  "$@" || rc=$?
  STEPS+=("$(printf '%-28s %6ss  rc=%d' "$name" "$(since "$t0")" "$rc")")
  return $rc
}
report() {  # report RC
  local rc=$1
  echo "ci: step timings:" >&2
  for s in "${STEPS[@]}"; do echo "ci:   $s" >&2; done
  echo "ci: total $(since "$t_start")s, exit $rc" >&2
}
install_pkgs() {
  # The build needs gcc and the libibverbs headers; run-in-vm.sh installs
  # qemu, busybox and the rdma user space it copies into the VM.
  local p missing=()
  for p in gcc libc6-dev libibverbs-dev; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || { echo "ci: missing packages ${missing[*]}; run as root or install them" >&2; return 1; }
  echo "ci: installing ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

out=$(mktemp -d /tmp/rdmamgr-softroce-ci.XXXXXX)
trap 'rc=$?; rm -rf "$out"; report $rc; exit $rc' EXIT

build() {
  local race=()
  [ "${RDMAMGR_RACE:-0}" = 1 ] && race=(-race)
  ( cd "$root" && CGO_ENABLED=1 "$GO" test -tags ibverbs "${race[@]}" -c -o "$out/ibverbs.test" ./backend/ibverbs &&
    CGO_ENABLED=1 "$GO" build -tags ibverbs -o "$out/rdmamgr" ./cmd/rdmamgr )
  cp "$here/managers-guest.sh" "$out/"
}

step "install packages" install_pkgs
step "build test binary" build
# -test.timeout bounds the tests inside the VM; SOFTROCE_TIMEOUT bounds the VM.
rc=0
SOFTROCE_ENV="RDMAMGR_REQUIRE_IBVERBS=1 ${SOFTROCE_ENV:-}" \
  step "run in Soft-RoCE VM" "$here/run-in-vm.sh" "${VMFLAGS[@]}" "$out" \
    ./managers-guest.sh "$@" || rc=$?
exit $rc
