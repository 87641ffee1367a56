#!/usr/bin/env bash
# One table of rdmamgr against a plain Go TCP baseline and UCX's tcp
# transport, all measured now on this machine at one placement:
# `rdmamgr bench --baseline --json` (ours and plain TCP, in one run) and
# bench/ucx.sh (ucx_perftest) at the same sizes and placement. Prints a
# Markdown table (the README's) and whether the goals are met.
#
# usage: bench/compare.sh [--placement split|same|any] [--sizes LIST] [--ops LIST]
#                         [--out DIR] [-- more `rdmamgr bench` flags]
#
#   --placement  default split: bench (and ucx_perftest's client) on the
#                first allowed CPU, the servers on the second
#   --sizes      default 4KiB,64KiB,1MiB,16MiB
#   --out DIR    keep ours.json, ucx.tsv and the logs there (default: a
#                temporary directory, removed at the end)
#
# Environment: RDMAMGR (an rdmamgr binary to use instead of building one);
# UCX_ITERS, UCX_OUTSTANDING, UCX_REPEAT as for bench/ucx.sh.
# Needs jq (installed with apt-get when missing) and go unless RDMAMGR is set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

placement=split
sizes="4KiB,64KiB,1MiB,16MiB"
ops="put,get"
out=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --placement) placement="$2"; shift 2 ;;
    --placement=*) placement="${1#*=}"; shift ;;
    --sizes) sizes="$2"; shift 2 ;;
    --sizes=*) sizes="${1#*=}"; shift ;;
    --ops) ops="$2"; shift 2 ;;
    --ops=*) ops="${1#*=}"; shift ;;
    --out) out="$2"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown argument $1 (bench flags go after --)" >&2; exit 2 ;;
  esac
done

if ! command -v jq >/dev/null 2>&1; then
  echo "compare.sh: jq missing; installing it" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq jq >&2
fi

if [ -n "$out" ]; then
  mkdir -p "$out"
  dir=$(cd "$out" && pwd)
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi

bin=${RDMAMGR:-}
if [ -z "$bin" ]; then
  bin="$dir/rdmamgr"
  echo "compare.sh: go build -o $bin ./cmd/rdmamgr" >&2
  (cd "$root" && go build -o "$bin" ./cmd/rdmamgr)
fi

bench_cmd=("$bin" bench --baseline --placement "$placement" --sizes "$sizes" --ops "$ops" --json "$dir/ours.json" ${extra[@]+"${extra[@]}"})
echo "compare.sh: ${bench_cmd[*]}" >&2
"${bench_cmd[@]}" | tee "$dir/bench.log" >&2
echo "compare.sh: $here/ucx.sh --placement $placement --sizes $sizes --ops $ops" >&2
"$here/ucx.sh" --placement "$placement" --sizes "$sizes" --ops "$ops" --tsv "$dir/ucx.tsv" | tee "$dir/ucx.log" >&2

j="$dir/ours.json"
ucx_version=$(head -1 "$dir/ucx.log" | awk '{print $2}')
case "$placement" in
  any) where="no pinning: the scheduler places every process" ;;
  same) where="every process on CPU $(jq -r .bench_cpu "$j")" ;;
  split) where="bench and ucx_perftest's client on CPU $(jq -r .bench_cpu "$j"); the manager, the baseline server and ucx_perftest's server on CPU $(jq -r .server_cpu "$j")" ;;
esac
outstanding=${UCX_OUTSTANDING:-1}
ucx_runs=""
[ "${UCX_REPEAT:-1}" -gt 1 ] && ucx_runs=", best of ${UCX_REPEAT} runs"

echo
echo "Placement: **$placement** ($where). Loopback, $(nproc) CPUs, $(jq -r .backend "$j") backend," \
  "$(jq -r .conns "$j") connections, $(jq -r .concurrency "$j") operations in flight; plain TCP:" \
  "a Go stream of the same operations over the same connections; UCX $ucx_version ucx_perftest," \
  "UCX_TLS=tcp (put: ucp_put_bw -O $outstanding; get: ucp_get$ucx_runs)."
echo
echo "| size | op | ours MiB/s | plain TCP MiB/s | UCX MiB/s | ours/TCP | ours/UCX |"
echo "|------|----|-----------:|----------------:|----------:|---------:|---------:|"
jq -r '.throughput[] | [.size_bytes, .size, .op, .ours_mib_s, .tcp_mib_s, .ratio] | @tsv' "$j" |
  awk -F'\t' -v ucx="$dir/ucx.tsv" '
    BEGIN { while ((getline l < ucx) > 0) { split(l, f, "\t"); u[f[1] "/" f[3]] = f[4] } }
    {
      k = $1 "/" $3; uv = (k in u) ? u[k] : "-"
      mark = ($3 == "get") ? "*" : ""
      if (uv == "-" || uv + 0 == 0) { us = "-"; ur = "-" } else { us = sprintf("%.1f%s", uv, mark); ur = sprintf("%.2f%s", $4 / uv, mark) }
      printf "| %s | %s | %.1f | %.1f | %s | %.2f | %s |\n", $2, $3, $4, $5, us, $6, ur
    }'
echo
jq -r '.latency | "8-byte Get round trip p50: ours \(.ours_p50_us * 10 | round / 10) µs, plain TCP ping-pong \(.tcp_p50_us * 10 | round / 10) µs, ratio \(.ratio_p50 * 100 | round / 100) (p99: \(.ours_p99_us * 10 | round / 10) µs vs \(.tcp_p99_us * 10 | round / 10) µs; \(.count) round trips)."' "$j"
jq -r '.pipeline | "64-byte Put, \(.depth) in flight over \(.conns) connections: ours \(.ours_ops_s | round) ops/s, plain TCP request/response pipeline \(.tcp_ops_s | round) ops/s, ratio \(.ratio * 100 | round / 100)."' "$j"
if grep -q '	get	' "$dir/ucx.tsv" 2>/dev/null; then
  echo
  echo "\* ucx_perftest's ucp_get responder progresses about once per millisecond, so its get figure is a harness artefact, not UCX's get speed."
fi

echo
echo "Goals:"
jq -r '.throughput[] | select(.size_bytes == 1048576 or .size_bytes == 16777216) |
  "- \(.op) \(.size) ≥ 0.9× plain TCP: \(.ratio * 100 | round / 100) — \(if .ratio >= 0.9 then "met" else "NOT met" end)"' "$j"
jq -r '.throughput[] | select(.size_bytes == 1048576) | [.op, .ours_mib_s] | @tsv' "$j" |
  while IFS=$'\t' read -r op ours; do
    u=$(awk -F'\t' -v op="$op" '$1 == 1048576 && $3 == op { print $4 }' "$dir/ucx.tsv" 2>/dev/null)
    if [ -z "$u" ] || [ "$u" = "-" ]; then echo "- $op 1MiB ≥ 2× UCX: no UCX figure"; continue; fi
    awk -v o="$ours" -v u="$u" -v op="$op" 'BEGIN {
      r = o / u; note = (op == "get") ? " (against the ucp_get artefact figure)" : ""
      printf "- %s 1MiB ≥ 2× UCX: %.2f — %s%s\n", op, r, (r >= 2 ? "met" : "NOT met"), note }'
  done
jq -r '.latency | "- 8-byte Get p50 ≤ 1.2× plain TCP ping-pong: \(.ratio_p50 * 100 | round / 100) — \(if .ratio_p50 <= 1.2 then "met" else "NOT met" end)"' "$j"
jq -r '.pipeline | "- 64-byte Put pipeline (reported, no bound): \(.ratio * 100 | round / 100)× plain TCP"' "$j"
echo
repro="bench/compare.sh --placement $placement"
[ "$sizes" != "4KiB,64KiB,1MiB,16MiB" ] && repro+=" --sizes $sizes"
[ "$ops" != "put,get" ] && repro+=" --ops $ops"
[ -n "${UCX_REPEAT:-}" ] && repro="UCX_REPEAT=$UCX_REPEAT $repro"
[ ${#extra[@]} -gt 0 ] && repro+=" -- ${extra[*]}"
echo "Reproduce: $repro"
