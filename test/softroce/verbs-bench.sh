#!/usr/bin/env bash
# verbs-bench.sh -- the ibverbs backend's FetchAdd ops/s and
# PutWithImm-to-event latency (BenchmarkVerbs* of its test binary) side by
# side with perftest's ib_atomic_bw and ib_send_lat (and ib_write_lat) on
# Soft-RoCE, in one run of the VM of run-in-vm.sh.
#
# Usage: test/softroce/verbs-bench.sh [-v]
# Environment: BENCH_COUNT (perftest iterations; 2000), BENCH_TIME
# (-test.benchtime; 2s), and everything run-in-vm.sh reads.
#
# The figures compare the two on the same stack only: under TCG (no KVM)
# Soft-RoCE is CPU-bound emulation, and both sides share 2 vCPUs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
VMFLAGS=()
if [ "${1:-}" = "-v" ]; then VMFLAGS+=(-v); shift; fi
out=$(mktemp -d /tmp/rdmamgr-softroce-vbench.XXXXXX)
trap 'rm -rf "$out"' EXIT
( cd "$root" && CGO_ENABLED=1 "${GO:-go}" test -tags ibverbs -c -o "$out/ibverbs.test" ./backend/ibverbs )
cp "$here/verbs-bench-guest.sh" "$out/"
SOFTROCE_ENV="BENCH_COUNT=${BENCH_COUNT:-2000} BENCH_TIME=${BENCH_TIME:-2s} ${SOFTROCE_ENV:-}" \
  "$here/run-in-vm.sh" "${VMFLAGS[@]}" "$out" './verbs-bench-guest.sh'
