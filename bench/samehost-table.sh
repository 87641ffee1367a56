#!/usr/bin/env bash
# Prints the same-host table of bench/samehost.sh from the files of one run
# in DIR: ours.json (`rdmamgr bench --baseline --against memcpy --json`),
# ucx-sm.tsv and ucx-posix-cma.tsv (bench/ucx.sh --tsv --latency; empty or
# missing: "-"), ucx-sm-oprate.tsv (bench/ucx.sh --tsv --outstanding N at
# the sizes up to 4KiB: the "Op rate" table), and the logs ucx-*.log for UCX's version. A Markdown table,
# the 8-byte latencies, and the issue's goals with met / NOT met.
#
# usage: bench/samehost-table.sh DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: bench/samehost-table.sh DIR" >&2; exit 2; }
dir=$1
j="$dir/ours.json"
[ -r "$j" ] || { echo "samehost-table.sh: no $j" >&2; exit 1; }
sm="$dir/ucx-sm.tsv"
pc="$dir/ucx-posix-cma.tsv"
for t in "$sm" "$pc"; do [ -e "$t" ] || : >"$t"; done

backend=$(jq -r .backend "$j")
placement=$(jq -r .placement "$j")
bcpu=$(jq -r .bench_cpu "$j")
scpu=$(jq -r .server_cpu "$j")
case "$placement" in
  any) where="no pinning: the scheduler places every process" ;;
  same) where="every process on CPU $bcpu" ;;
  split) where="bench, its memcpy and ucx_perftest's client on CPU $bcpu; the manager and ucx_perftest's server on CPU $scpu" ;;
  *) where="$placement" ;;
esac
ucx_version=$(head -1 "$dir/ucx-sm.log" 2>/dev/null | awk '$1 == "UCX" {print $2}')
ucx_version=${ucx_version:-"(not run)"}
conc=$(jq -r .concurrency "$j")
inflight="$conc operations"
[ "$conc" = 1 ] && inflight="1 operation"
small=$(jq -r '.inflight // 0' "$j")
[ "$small" -gt 0 ] && inflight="$small operations at sizes up to 4KiB (one goroutine posts and reaps them), $inflight above"
op_tsv="$dir/ucx-sm-oprate.tsv"
[ -e "$op_tsv" ] || : >"$op_tsv"

echo "Placement: **$placement** ($where). $backend backend, $inflight in flight; memcpy: Go \`copy\`" \
  "between two buffers of the same size from the bench's manager, one thread, the same count, in the same run;" \
  "UCX $ucx_version ucx_perftest (put: ucp_put_bw -O ${UCX_OUTSTANDING:-1}; get: ucp_get)."
if [ "$backend" != shm ]; then
  echo
  echo "**PLACEHOLDER: the \"ours\" figures are the $backend backend's, not shm's** (shm not built yet; re-run bench/samehost.sh)."
fi
echo
echo "| size | op | ours MiB/s | memcpy MiB/s | ours/memcpy | UCX sm MiB/s | ours/UCX sm | UCX posix,cma MiB/s |"
echo "|------|----|-----------:|-------------:|------------:|-------------:|------------:|--------------------:|"
jq -r '.throughput[] | [.size_bytes, .size, .op, .ours_mib_s, .memcpy_mib_s, .ratio] | @tsv' "$j" |
  awk -F'\t' -v sm="$sm" -v pc="$pc" '
    function load(file, into,   l, f) {
      while ((getline l < file) > 0) { split(l, f, "\t"); if (f[3] == "put" || f[3] == "get") into[f[1] "/" f[3]] = f[4] }
    }
    function r(x) { return x < 0.01 ? sprintf("%.4f", x) : sprintf("%.2f", x) }
    function bw(x) { return (x == "" || x == "-") ? "-" : sprintf("%.1f", x) }
    BEGIN { load(sm, s); load(pc, p) }
    {
      k = $1 "/" $3; us = s[k]; up = p[k]
      rs = (us == "" || us == "-" || us + 0 == 0) ? "-" : r($4 / us)
      printf "| %s | %s | %.1f | %.1f | %s | %s | %s | %s |\n", $2, $3, $4, $5, r($6), bw(us), rs, bw(up)
    }'
echo

# The op rate at the small sizes: ours and UCX sm with as many in flight.
if [ "$small" -gt 0 ]; then
  echo "Op rate, $small in flight (ours: \`rdmamgr bench --inflight $small\`; UCX sm: ucp_put_bw -O $small, ucp_get -O $small):"
  echo
  echo "| size | op | in flight | ours ops/s | ours MiB/s | UCX sm ops/s | ours/UCX sm |"
  echo "|------|----|----------:|-----------:|-----------:|-------------:|------------:|"
  jq -r '.throughput[] | select(.size_bytes <= 4096) | [.size_bytes, .size, .op, .inflight, .ours_ops_s, .ours_mib_s] | @tsv' "$j" |
    awk -F'\t' -v u="$op_tsv" '
      BEGIN { while ((getline l < u) > 0) { split(l, f, "\t"); if (f[4] != "-") m[f[1] "/" f[3]] = f[4] } }
      {
        k = $1 "/" $3; us = "-"; r = "-"
        if (k in m && m[k] > 0) { o = m[k] * 1048576 / $1; us = sprintf("%.0f", o); r = sprintf("%.2f", $5 / o) }
        printf "| %s | %s | %d | %.0f | %.1f | %s | %s |\n", $2, $3, $4, $5, $6, us, r
      }'
  echo
fi

# lat FILE OP: "p50 avg" of ucx.sh's latency line for OP (get, put), or "".
lat() { awk -F'\t' -v op="lat_$2" '$3 == op && $4 != "-" { print $4, $7 }' "$1"; }
jq -r '.latency | "- 8-byte Get round trip, one at a time: ours p50 \(.ours_p50_us * 100 | round / 100) µs, p99 \(.ours_p99_us * 100 | round / 100) µs (\(.count) round trips; placement '"$placement"')."' "$j"
for t in sm posix,cma; do
  f=$sm
  [ "$t" = sm ] || f=$pc
  g=$(lat "$f" get)
  p=$(lat "$f" put)
  [ -n "$g$p" ] || continue
  echo "- UCX $t, 8 bytes: get one at a time p50 ${g%% *} µs (average ${g##* }); put ping-pong, half the round trip, p50 ${p%% *} µs (average ${p##* })."
done
mib=$(jq -r '.throughput[] | select(.size_bytes == 1048576) | "\(.op)\t\(.memcpy_mib_s)"' "$j")
while IFS=$'\t' read -r op mc; do
  [ -n "$op" ] || continue
  u=$(awk -F'\t' -v op="$op" '$1 == 1048576 && $3 == op { print $4 }' "$sm")
  if [ -n "$u" ] && [ "$u" != "-" ]; then
    awk -v u="$u" -v m="$mc" -v op="$op" 'BEGIN {
      printf "- UCX sm 1MiB %s runs at %.2f× this run'"'"'s memcpy: ≥1.5× UCX sm needs ours at %.2f× memcpy%s.\n",
        op, u / m, 1.5 * u / m, (1.5 * u / m > 1 ? " (more than one copy can do)" : "") }'
  fi
done <<<"$mib"

echo
echo "Goals:"
# oprate_goal SIZE WANT: ours/UCX sm op rate at SIZE bytes against WANT.
oprate_goal() {
  jq -r --argjson s "$1" '.throughput[] | select(.size_bytes == $s) | [.size, .op, .ours_ops_s] | @tsv' "$j" |
    while IFS=$'\t' read -r name op ours; do
      u=$(awk -F'\t' -v s="$1" -v op="$op" '$1 == s && $3 == op { print $4 }' "$op_tsv")
      if [ -z "$u" ] || [ "$u" = "-" ]; then echo "- $name $op op rate ≥ $2× UCX sm: no UCX figure"; continue; fi
      awk -v o="$ours" -v u="$u" -v s="$1" -v w="$2" -v n="$name" -v op="$op" 'BEGIN {
        r = o / (u * 1048576 / s); printf "- %s %s op rate ≥ %s× UCX sm (same in flight): %.2f — %s\n", n, op, w, r, (r >= w ? "met" : "NOT met") }'
    done
}
if [ "$small" -gt 0 ]; then
  oprate_goal 8 0.5
  oprate_goal 4096 0.8
fi
jq -r '.throughput[] | select(.size_bytes == 1048576) |
  "- \(.op) 1MiB ≥ 0.7× memcpy: \(.ratio * 100 | round / 100) — \(if .ratio >= 0.7 then "met" else "NOT met" end)"' "$j"
jq -r '.throughput[] | select(.size_bytes == 1048576) | [.op, .ours_mib_s] | @tsv' "$j" |
  while IFS=$'\t' read -r op ours; do
    u=$(awk -F'\t' -v op="$op" '$1 == 1048576 && $3 == op { print $4 }' "$sm")
    if [ -z "$u" ] || [ "$u" = "-" ]; then echo "- $op 1MiB ≥ 1.5× UCX sm: no UCX figure"; continue; fi
    awk -v o="$ours" -v u="$u" -v op="$op" 'BEGIN {
      r = o / u; printf "- %s 1MiB ≥ 1.5× UCX sm: %.2f — %s\n", op, r, (r >= 1.5 ? "met" : "NOT met") }'
  done
jq -r '.latency | "- 8-byte Get p50 ≤ 2 µs: \(.ours_p50_us * 100 | round / 100) µs — \(if .ours_p50_us <= 2 then "met" else "NOT met" end)"' "$j"
if [ "$backend" != shm ]; then
  echo "- (placeholder: measured on the $backend backend; the goals are shm's)"
fi
