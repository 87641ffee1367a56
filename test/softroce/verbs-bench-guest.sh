#!/bin/sh
# verbs-bench-guest.sh -- runs inside the Soft-RoCE VM (verbs-bench.sh puts
# it there): the ibverbs test binary's verbs benchmarks (FetchAdd ops/s,
# PutWithImm-to-event and Send-to-message latency) next to perftest's
# ib_atomic_bw and ib_send_lat (and ib_write_lat) on the same rxe0. Uses
# RXE_DEV and RXE_GID_INDEX from the VM's init; BENCH_COUNT (perftest
# iterations) and BENCH_TIME (-test.benchtime) from verbs-bench.sh.
set -u
D=$RXE_DEV; G=$RXE_GID_INDEX
N=${BENCH_COUNT:-2000}
fails=0

echo "=== ibverbs.test -test.bench=BenchmarkVerbs (benchtime ${BENCH_TIME:-2s})"
./ibverbs.test -test.run='^$' -test.bench=BenchmarkVerbs -test.benchtime="${BENCH_TIME:-2s}" \
  -test.count=1 -test.timeout=20m || fails=$((fails+1))

pair() {  # pair NAME SERVER-CMD CLIENT-CMD
  echo "=== $1"
  timeout 300 $2 > /tmp/srv.out 2>&1 &
  p=$!
  sleep 1
  timeout 300 $3 || fails=$((fails+1))
  wait $p || { fails=$((fails+1)); cat /tmp/srv.out; }
}
# -F: no CPU-frequency check (TCG); -o: atomics outstanding, like the
# benchmark's window; -t: send queue depth.
for o in 1 16; do
  P="-d $D -x $G -F -n $N -A FETCH_AND_ADD -o $o -t $o"
  pair "ib_atomic_bw FETCH_AND_ADD -o $o" "ib_atomic_bw $P" "ib_atomic_bw $P 127.0.0.1"
done
for s in 8 4096; do
  P="-d $D -x $G -F -n $N -s $s"
  pair "ib_send_lat -s $s" "ib_send_lat $P" "ib_send_lat $P 127.0.0.1"
  pair "ib_write_lat -s $s" "ib_write_lat $P" "ib_write_lat $P 127.0.0.1"
done
echo "=== verbs bench: $fails failure(s)"
exit $fails
