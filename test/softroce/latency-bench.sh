#!/usr/bin/env bash
# latency-bench.sh -- the ibverbs backend's small-operation latency and op
# rate (BenchmarkVerbsLatency: 8 B and 64 B Put and Get post-to-completion;
# BenchmarkVerbsRate: 64 B Puts with 64 in flight, by Post and by
# PostList) for each poller spin in SPINS, side by side with perftest's
# ib_write_lat, ib_read_lat and ib_write_bw on Soft-RoCE, in one run of
# the VM of run-in-vm.sh. It is how Config.Spin's default was chosen.
#
# Usage: test/softroce/latency-bench.sh [-v]
# Environment: SPINS (poller spins to try, comma-separated; 0,10us,50us,200us), LAT_N
# (latency iterations; 1000), RATE_N (rate operations; 20000), COUNT
# (repeats of each; 3), TESTS (a -test.run regexp of tests to run first,
# one word; none by default), and everything run-in-vm.sh reads.
#
# The figures compare the two on the same stack only: under TCG (no KVM)
# Soft-RoCE is CPU-bound emulation, and both sides share 2 vCPUs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
VMFLAGS=()
if [ "${1:-}" = "-v" ]; then VMFLAGS+=(-v); shift; fi
out=$(mktemp -d /tmp/rdmamgr-softroce-lbench.XXXXXX)
trap 'rm -rf "$out"' EXIT
( cd "$root" && CGO_ENABLED=1 "${GO:-go}" test -tags ibverbs -c -o "$out/ibverbs.test" ./backend/ibverbs )
cp "$here/latency-bench-guest.sh" "$out/"
SOFTROCE_ENV="SPINS=${SPINS:-0,10us,50us,200us} LAT_N=${LAT_N:-1000} RATE_N=${RATE_N:-20000} COUNT=${COUNT:-3} TESTS=${TESTS:-} ${SOFTROCE_ENV:-}" \
  "$here/run-in-vm.sh" "${VMFLAGS[@]}" "$out" './latency-bench-guest.sh'
