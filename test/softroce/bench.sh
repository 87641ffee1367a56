#!/usr/bin/env bash
# bench.sh -- `rdmamgr bench` over the ibverbs backend side by side with
# perftest (ib_write_bw / ib_read_bw) on Soft-RoCE in the VM of run-in-vm.sh.
#
# Usage: test/softroce/bench.sh [-v]
# Environment: BENCH_SIZES (bytes, space-separated; "65536 1048576"),
# BENCH_COUNT (operations per run; 200), BENCH_CONC (in flight; 4), and
# everything run-in-vm.sh reads (SOFTROCE_MTU=9000 gives rxe MTU 4096).
#
# The figures are for comparing the two on the same stack only: under TCG
# (no KVM) Soft-RoCE is CPU-bound emulation, and both sides share 2 vCPUs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
VMFLAGS=()
if [ "${1:-}" = "-v" ]; then VMFLAGS+=(-v); shift; fi
out=$(mktemp -d /tmp/rdmamgr-softroce-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
t0=$(date +%s)
( cd "$root" && CGO_ENABLED=1 "${GO:-go}" build -tags ibverbs -o "$out/rdmamgr" ./cmd/rdmamgr )
cp "$here/bench-guest.sh" "$out/"
echo "bench: built in $(( $(date +%s) - t0 ))s" >&2
SOFTROCE_ENV="BENCH_SIZES=$(echo "${BENCH_SIZES:-65536 1048576}" | tr ' ' ,) BENCH_COUNT=${BENCH_COUNT:-200} BENCH_CONC=${BENCH_CONC:-4} ${SOFTROCE_ENV:-}" \
  "$here/run-in-vm.sh" "${VMFLAGS[@]}" "$out" './bench-guest.sh'
