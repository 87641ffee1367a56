#!/bin/sh
# bench-guest.sh -- runs inside the Soft-RoCE VM (bench.sh puts it there):
# `rdmamgr bench` over the ibverbs backend next to perftest's ib_write_bw
# and ib_read_bw on the same rxe0, same message sizes. Uses RXE_DEV and
# RXE_GID_INDEX from the VM's init; BENCH_SIZES / BENCH_COUNT / BENCH_CONC
# from bench.sh.
set -u
D=$RXE_DEV; G=$RXE_GID_INDEX
SIZES=$(echo "${BENCH_SIZES:-65536,1048576}" | tr , " ")
COUNT=${BENCH_COUNT:-200}
CONC=${BENCH_CONC:-4}
fails=0

echo "=== rdmamgr devices"
./rdmamgr devices || fails=$((fails+1))

echo "=== rdmamgr serve --backend ibverbs"
./rdmamgr serve --listen 127.0.0.1:7700 --backend ibverbs --log-level warn > /tmp/serve.out 2> /tmp/serve.err &
sp=$!
for i in $(seq 1 100); do grep -q '^ready' /tmp/serve.out 2>/dev/null && break; sleep 0.1; done
if ! grep -q '^ready' /tmp/serve.out; then
  echo "serve did not come up"; cat /tmp/serve.out /tmp/serve.err; exit 1
fi
cat /tmp/serve.out
for s in $SIZES; do
  for op in put get; do
    echo "=== rdmamgr bench --op $op --size $s --count $COUNT --concurrency $CONC (ibverbs)"
    timeout 300 ./rdmamgr bench --peer 127.0.0.1:7700 --backend ibverbs --op $op --size "$s" \
      --count "$COUNT" --concurrency "$CONC" || fails=$((fails+1))
  done
done
kill $sp 2>/dev/null; wait $sp 2>/dev/null
echo "--- serve stderr:"; cat /tmp/serve.err

pair() {  # pair NAME SERVER-CMD CLIENT-CMD
  echo "=== $1"
  timeout 300 $2 > /tmp/srv.out 2>&1 &
  p=$!
  sleep 1
  timeout 300 $3 || fails=$((fails+1))
  wait $p || { fails=$((fails+1)); cat /tmp/srv.out; }
}
# -q: queue pairs; -t: tx depth, like --concurrency; -F: no CPU-frequency check (TCG)
for s in $SIZES; do
  P="-d $D -x $G -F --report_gbits -s $s -n $COUNT -t $CONC"
  pair "ib_write_bw -s $s" "ib_write_bw $P" "ib_write_bw $P 127.0.0.1"
  pair "ib_read_bw -s $s" "ib_read_bw $P -o $CONC" "ib_read_bw $P -o $CONC 127.0.0.1"
done
echo "=== bench: $fails failure(s)"
exit $fails
