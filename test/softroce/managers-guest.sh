#!/bin/sh
# managers-guest.sh -- runs inside the Soft-RoCE VM after the ibverbs test
# binary (ci.sh puts both there): two rdmamgr processes, two managers on one
# rxe device, moving verified bytes both ways over an ibverbs route.
set -u
./ibverbs.test -test.v -test.count=1 -test.timeout=20m "$@" || exit $?

echo "=== two managers over ibverbs: rdmamgr serve + rdmamgr bench --verify"
./rdmamgr serve --listen 127.0.0.1:7700 --backend ibverbs --log-level warn > /tmp/serve.out 2> /tmp/serve.err &
sp=$!
for i in $(seq 1 100); do grep -q '^ready' /tmp/serve.out 2>/dev/null && break; sleep 0.1; done
if ! grep -q '^ready' /tmp/serve.out; then
  echo "serve did not come up"; cat /tmp/serve.out /tmp/serve.err; exit 1
fi
fails=0
for op in put get; do
  timeout 300 ./rdmamgr bench --peer 127.0.0.1:7700 --backend ibverbs --op $op --size 1MiB \
    --count 16 --concurrency 4 --verify > /tmp/bench.out 2>&1 || fails=$((fails+1))
  cat /tmp/bench.out
  grep -q 'backend=ibverbs' /tmp/bench.out || { echo "route did not use ibverbs"; fails=$((fails+1)); }
  grep -q 'verify: ok' /tmp/bench.out || fails=$((fails+1))
done
kill $sp 2>/dev/null; wait $sp 2>/dev/null
if [ $fails -ne 0 ]; then echo "--- serve stderr:"; cat /tmp/serve.err; fi
echo "=== two managers over ibverbs: $fails failure(s)"
exit $fails
