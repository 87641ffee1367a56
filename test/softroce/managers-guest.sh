#!/bin/sh
# managers-guest.sh -- runs inside the Soft-RoCE VM after the ibverbs test
# binary (ci.sh puts both there): two rdmamgr processes, two managers on one
# rxe device, moving verified bytes both ways over an ibverbs route; then
# two host agents (--host-id A, B) and a process attached to each, moving
# verified bytes through both agents, whose route takes ibverbs.
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
total=$fails

# Two host agents in one VM (issue 26): --host-id makes them, and the
# processes attached to them, two hosts though they share the kernel, so
# the route goes process -> agent A -> agent B -> process (not shm), and
# the agents' route takes ibverbs on rxe0. RDMAMGR_AGENT_BACKEND (default
# ibverbs; comma-separated for several runs, e.g. tcp,ibverbs) is the
# agents' --backend and the backend their route must take. Processes on
# both sides post, so each agent sets up its routes to the other: on
# ibverbs N/2 each (--agent-routes, default 4; a route is one RC queue
# pair), N queue pairs per pair of hosts; on TCP one route each (of N/2
# connections).
waitfor() {  # waitfor FILE PATTERN: up to 10 s
  for i in $(seq 1 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "no '$2' in $1:"; cat "$1"; return 1
}
agents() {  # agents BACKEND: prints the failures' count last
  ab=$1
  echo "=== two host agents on rxe0 ($ab): process of host A -> agent A -> agent B -> process of host B"
  fails=0
  rm -f /tmp/a.sock /tmp/b.sock
  ./rdmamgr serve --listen 127.0.0.1:7710 --metrics-listen off --agent-socket /tmp/a.sock --host-id A --backend "$ab" \
    --log-level info > /tmp/agent-a.out 2> /tmp/agent-a.err &
  a1=$!
  ./rdmamgr serve --listen 127.0.0.1:7720 --metrics-listen off --agent-socket /tmp/b.sock --host-id B --backend "$ab" \
    --log-level info > /tmp/agent-b.out 2> /tmp/agent-b.err &
  a2=$!
  waitfor /tmp/agent-a.out '^ready' && waitfor /tmp/agent-b.out '^ready' || fails=$((fails+1))
  ./rdmamgr serve --listen 127.0.0.1:7730 --metrics-listen off --agent /tmp/b.sock --host-id B --log-level info \
    > /tmp/proc-b.out 2> /tmp/proc-b.err &
  pb=$!
  waitfor /tmp/proc-b.out '^ready' && waitfor /tmp/proc-b.err 'attached to the host agent' || fails=$((fails+1))
  ./rdmamgr serve --listen 127.0.0.1:7740 --metrics-listen off --agent /tmp/a.sock --host-id A --log-level info \
    > /tmp/proc-a.out 2> /tmp/proc-a.err &
  pa=$!
  waitfor /tmp/proc-a.out '^ready' && waitfor /tmp/proc-a.err 'attached to the host agent' || fails=$((fails+1))
  if [ $fails -eq 0 ]; then
    for op in put get; do
      timeout 300 ./rdmamgr bench --agent /tmp/a.sock --host-id A --peer 127.0.0.1:7730 --op $op \
        --size 1MiB --count 16 --concurrency 4 --verify --log-level info > /tmp/bench.out 2>&1 || fails=$((fails+1))
      cat /tmp/bench.out
      grep -q 'backend=agent' /tmp/bench.out || { echo "bench's route did not go through the agents"; fails=$((fails+1)); }
      grep -q 'via host agent' /tmp/bench.out || { echo "bench's route does not say it goes via the agents"; fails=$((fails+1)); }
      grep -q "via host agent (slot [0-9]* at agent [^)]*) over $ab" /tmp/bench.out || { echo "bench's route does not say the agents' route runs on $ab"; fails=$((fails+1)); }
      grep -q 'verify: ok' /tmp/bench.out || { echo "bytes not verified"; fails=$((fails+1)); }
    done
    # The other way: a process of host B puts to one of host A (agent B
    # sets up its routes to agent A).
    timeout 300 ./rdmamgr bench --agent /tmp/b.sock --host-id B --peer 127.0.0.1:7740 --op put \
      --size 64KiB --count 16 --verify --log-level info > /tmp/bench.out 2>&1 || fails=$((fails+1))
    cat /tmp/bench.out
    grep -q 'verify: ok' /tmp/bench.out || { echo "B to A: bytes not verified"; fails=$((fails+1)); }
    # Each agent's routes to the other (their "route up" lines: the
    # manager's route k > 0 is PEER#k) take the backend, N/2 of them on
    # ibverbs, one on TCP: N queue pairs (or N connections) per pair of
    # hosts.
    want=1; [ "$ab" = ibverbs ] && want=2
    for side in "a 127.0.0.1:7720" "b 127.0.0.1:7710"; do
      set -- $side
      n=0
      for i in $(seq 1 100); do
        n=$(grep 'route up' /tmp/agent-$1.err | grep 'direction=out' | grep "peer=\"\?$2" | grep "backend=$ab" \
          | sed 's/.* peer="\?\([^ "]*\).*/\1/' | sort -u | wc -l)
        [ "$n" -ge $want ] && break; sleep 0.1
      done
      grep 'route up' /tmp/agent-$1.err | grep 'direction=out'
      if [ "$n" -ne $want ]; then
        echo "agent $1: $n routes up to the other agent on $ab, want $want"; fails=$((fails+1))
      else
        echo "agent $1: $n route(s) to the other agent on $ab"
      fi
    done
  fi
  kill $pa $pb $a1 $a2 2>/dev/null; wait $pa $pb $a1 $a2 2>/dev/null
  if [ $fails -ne 0 ]; then
    for f in agent-a agent-b proc-a proc-b; do echo "--- $f stderr:"; cat /tmp/$f.err; done
  fi
  echo "=== two host agents on rxe0 ($ab): $fails failure(s)"
  return $fails
}
for ab in $(echo "${RDMAMGR_AGENT_BACKEND:-ibverbs}" | tr , ' '); do
  agents "$ab" || total=$((total+$?))
done
exit $total
