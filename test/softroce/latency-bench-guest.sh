#!/bin/sh
# latency-bench-guest.sh -- runs inside the Soft-RoCE VM (latency-bench.sh
# puts it there): BenchmarkVerbsLatency and BenchmarkVerbsRate of the
# ibverbs test binary for each poller spin in SPINS, then perftest's
# ib_write_lat / ib_read_lat (-s 8, 64) and ib_write_bw (-s 64, 64
# outstanding), COUNT times each, on the same rxe0. Uses RXE_DEV and
# RXE_GID_INDEX from the VM's init.
set -u
D=$RXE_DEV; G=$RXE_GID_INDEX
SPINS=$(echo "${SPINS:-0,10us,50us,200us}" | tr , " ")
LN=${LAT_N:-1000}; RN=${RATE_N:-20000}; C=${COUNT:-3}
fails=0
if [ -n "${TESTS:-}" ]; then  # a test run first (latency-bench.sh TESTS=regexp)
  echo "=== ibverbs.test -test.run=$TESTS"
  ./ibverbs.test -test.v -test.run="$TESTS" -test.count=1 -test.timeout=10m > /tmp/tests.out 2>&1 || fails=$((fails+1))
  grep -E -- '--- |^(FAIL|PASS|ok)|_test.go' /tmp/tests.out
fi
for s in $SPINS; do
  echo "=== ibverbs.test spin=$s"
  RDMAMGR_IBV_SPIN=$s ./ibverbs.test -test.run='^$' -test.bench='BenchmarkVerbsLatency' \
    -test.benchtime="${LN}x" -test.count="$C" -test.timeout=20m || fails=$((fails+1))
  RDMAMGR_IBV_SPIN=$s ./ibverbs.test -test.run='^$' -test.bench='BenchmarkVerbsRate' \
    -test.benchtime="${RN}x" -test.count="$C" -test.timeout=20m || fails=$((fails+1))
done

pair() {  # pair NAME SERVER-CMD CLIENT-CMD
  echo "=== $1"
  timeout 300 $2 > /tmp/srv.out 2>&1 &
  p=$!
  sleep 1
  timeout 300 $3 || fails=$((fails+1))
  wait $p || { fails=$((fails+1)); cat /tmp/srv.out; }
}
# -F: no CPU-frequency check (TCG).
for i in $(seq 1 "$C"); do
  for s in 8 64; do
    P="-d $D -x $G -F -n $LN -s $s"
    pair "ib_write_lat -s $s (#$i)" "ib_write_lat $P" "ib_write_lat $P 127.0.0.1"
    pair "ib_read_lat -s $s (#$i)" "ib_read_lat $P" "ib_read_lat $P 127.0.0.1"
  done
  P="-d $D -x $G -F -n $RN -s 64 -t 64"
  pair "ib_write_bw -s 64 -t 64 (#$i)" "ib_write_bw $P" "ib_write_bw $P 127.0.0.1"
done
echo "=== latency bench: $fails failure(s)"
exit $fails
