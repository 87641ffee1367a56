#!/usr/bin/env bash
# Runs `rdmamgr bench --baseline --json` RUNS times and prints, per row,
# the median ratio (ours / plain TCP, both measured in the same run) with
# the lowest and highest: on a shared VM one run's ratio can move by 0.3,
# the median of several does not. Each run starts its own manager and
# baseline server at the given placement.
#
# usage: bench/repeat.sh [--runs N] [--out DIR] [-- more `rdmamgr bench --baseline` flags]
#
#   --runs N   runs (default 5)
#   --out DIR  keep run-K.json there (default: a temporary directory)
#
# Environment: RDMAMGR (an rdmamgr binary; default: go build one).
# Needs jq (installed with apt-get when missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs=5
out=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "repeat.sh: unknown argument $1 (bench flags go after --)" >&2; exit 2 ;;
  esac
done
if ! command -v jq >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq jq >&2
fi
if [ -n "$out" ]; then mkdir -p "$out"; dir=$(cd "$out" && pwd); else dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT; fi
bin=${RDMAMGR:-}
if [ -z "$bin" ]; then
  bin="$dir/rdmamgr"
  (cd "$root" && go build -o "$bin" ./cmd/rdmamgr)
fi
for k in $(seq "$runs"); do
  "$bin" bench --baseline --json "$dir/run-$k.json" "${extra[@]}" >"$dir/run-$k.txt" 2>&1 || {
    echo "repeat.sh: run $k failed:" >&2; cat "$dir/run-$k.txt" >&2; exit 1; }
done
first="$dir/run-1.json"
echo "placement: $(jq -r .placement "$first"); backend $(jq -r .backend "$first"); conns $(jq -r .conns "$first"); concurrency $(jq -r .concurrency "$first"); GOMAXPROCS $(jq -r .gomaxprocs "$first"); $runs runs"
echo
# median, and numbers with two or one decimals, for both tables below
defs='
  def med: sort | if length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
  def f2: . * 100 | round / 100 | tostring | if test("\\.") then (if test("\\.[0-9]$") then . + "0" else . end) else . + ".00" end;
  def f1: . * 10 | round / 10 | tostring | if test("\\.") then . else . + ".0" end;
'
echo "| size | op | ours MiB/s (median) | plain TCP MiB/s (median) | ratio: median (min–max) |"
echo "|---|---|---|---|---|"
jq -s -r "$defs"'
  (.[0].throughput | map({size, op})) as $rows
  | $rows[] as $r
  | [ .[] | .throughput[] | select(.size == $r.size and .op == $r.op) ] as $m
  | "| \($r.size) | \($r.op) | \($m | map(.ours_mib_s) | med | f1) | \($m | map(.tcp_mib_s) | med | f1) | **\($m | map(.ratio) | med | f2)** (\($m | map(.ratio) | min | f2)–\($m | map(.ratio) | max | f2)) |"
' "$dir"/run-*.json
jq -s -r "$defs"'
  (if .[0].latency then
    "| 8B get p50, 1 in flight | latency | \(map(.latency.ours_p50_us) | med | f1) µs | \(map(.latency.tcp_p50_us) | med | f1) µs (ping-pong) | **\(map(.latency.ratio_p50) | med | f2)** (\(map(.latency.ratio_p50) | min | f2)–\(map(.latency.ratio_p50) | max | f2)) |"
   else empty end),
  (if .[0].pipeline then
    "| 64B put, \(.[0].pipeline.depth) in flight | pipeline | \(map(.pipeline.ours_ops_s) | med | round) ops/s | \(map(.pipeline.tcp_ops_s) | med | round) ops/s | **\(map(.pipeline.ratio) | med | f2)** (\(map(.pipeline.ratio) | min | f2)–\(map(.pipeline.ratio) | max | f2)) |"
   else empty end)
' "$dir"/run-*.json
