#!/usr/bin/env bash
# The op-rate tables of the README ("Small operations"): small operations
# with many in flight, ours against a baseline measured in the same run,
# each run repeated and summarised as the median ratio with its range.
#
#   1. TCP: `rdmamgr bench --baseline --backend tcp --sizes 8B,64B,4KiB
#      --inflight N` (one goroutine keeps N in flight) against a plain Go TCP
#      stream with as many slots.
#   2. shm: `rdmamgr bench --baseline --backend shm --sizes 8B,4KiB
#      --inflight N` against UCX sm (bench/ucx.sh --tls sm --outstanding N:
#      ucp_put_bw -O N, ucp_get -O N) at the same placement.
#   3. processes: `rdmamgr bench --baseline --procs P --sizes 64B,4KiB`, P
#      bench processes against one manager against P plain TCP streams.
#
# usage: bench/oprate.sh [--runs N] [--inflight N] [--procs P]
#                        [--placement split|same|any] [--out DIR]
#                        [--no-tcp] [--no-shm] [--no-procs] [--no-ucx] [--quick]
#                        [-- more `rdmamgr bench` flags for every run]
#
#   --runs N       repeats of every measurement (default 3): median, range
#   --inflight N   operations in flight at the small sizes (default 64)
#   --procs P      bench processes of table 3 (default: the CPUs allowed, at
#                  least 2)
#   --placement    of tables 1 and 2 (default split: bench and UCX's client
#                  on the first allowed CPU, the servers on the second);
#                  table 3 is always any (the processes need every CPU)
#   --out DIR      keep every run's JSON and TSV there (default: removed)
#   --quick        short runs (3000 operations, 500 round trips, a 5000
#                  operation pipeline, 100000 UCX iterations): to check the
#                  script, not for figures
#   -- FLAGS       passed to every `rdmamgr bench` (of all three tables)
#
# Environment: RDMAMGR (a binary instead of building one), UCX_OPRATE_ITERS
# (UCX iterations and ours at shm, default 1000000), UCX_REPEAT (UCX best of N per run).
# Needs jq and go (unless RDMAMGR is set).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

runs=3
inflight=64
procs=""
placement=split
out=""
do_tcp=1; do_shm=1; do_procs=1; ucx=1
quick=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --inflight) inflight="$2"; shift 2 ;;
    --procs) procs="$2"; shift 2 ;;
    --placement) placement="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-tcp) do_tcp=0; shift ;;
    --no-shm) do_shm=0; shift ;;
    --no-procs) do_procs=0; shift ;;
    --no-ucx) ucx=0; shift ;;
    --quick) quick=(--count 3000 --lat-count 500); UCX_OPRATE_ITERS=100000; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "oprate.sh: unknown argument $1 (bench flags go after --)" >&2; exit 2 ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "oprate.sh: --runs $runs: want a positive number" >&2; exit 2; }
[[ "$inflight" =~ ^[1-9][0-9]*$ ]] || { echo "oprate.sh: --inflight $inflight: want a positive number" >&2; exit 2; }
if [ -z "$procs" ]; then
  procs=$(nproc)
  [ "$procs" -lt 2 ] && procs=2
fi
[[ "$procs" =~ ^[1-9][0-9]*$ ]] || { echo "oprate.sh: --procs $procs: want a positive number" >&2; exit 2; }
command -v jq >/dev/null 2>&1 || { echo "oprate.sh: needs jq (apt-get install jq)" >&2; exit 1; }

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
  echo "oprate.sh: go build -o $bin ./cmd/rdmamgr" >&2
  (cd "$root" && go build -o "$bin" ./cmd/rdmamgr)
fi

# bench ARGS...: rdmamgr bench with the common flags, output to stderr.
bench() {
  echo "oprate.sh: rdmamgr bench $* ${extra[*]+${extra[*]}}" >&2
  "$bin" bench "$@" ${extra[@]+"${extra[@]}"} >&2
}

# summarise: lines "size<TAB>op<TAB>n<TAB>ours<TAB>base<TAB>ratio" (one per
# run) -> a Markdown row per size and op, in order of first appearance:
# median ours and base, median ratio (lowest–highest).
summarise() {
  awk -F'\t' '
    function num(x) { return x < 100 ? sprintf("%.1f", x) : sprintf("%.0f", x) }
    function med(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { k = $1 "\t" $2 "\t" $3; if (!(k in cnt)) order[++nk] = k; c = ++cnt[k]; o[k, c] = $4; b[k, c] = $5; r[k, c] = $6 }
    END {
      for (x = 1; x <= nk; x++) {
        k = order[x]; n = cnt[k]
        for (i = 1; i <= n; i++) { oo[i] = o[k, i]; bb[i] = b[k, i]; rr[i] = r[k, i] }
        mo = med(oo, n); mb = med(bb, n); mr = med(rr, n)
        split(k, f, "\t")
        printf "| %s | %s | %s | %s | %s | %.2f (%.2f–%.2f) |\n", f[1], f[2], f[3], num(mo), num(mb), mr, rr[1], rr[n]
      }
    }'
}

echo "# rdmamgr op rate, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $runs runs each: median (lowest–highest)"
echo

if [ "$do_tcp" = 1 ]; then
  for i in $(seq "$runs"); do
    bench --baseline --backend tcp --placement "$placement" --sizes 8B,64B,4KiB --inflight "$inflight" --json "$dir/tcp-$i.json" \
      ${quick[@]+"${quick[@]}" --pipeline-count 5000}
  done
  echo "## TCP, $inflight in flight, placement $placement: ours against a plain Go TCP stream"
  echo
  echo "Reproduce: \`bench/oprate.sh --no-shm --no-procs --inflight $inflight --placement $placement\` (one run: \`rdmamgr bench --baseline --backend tcp --placement $placement --sizes 8B,64B,4KiB --inflight $inflight\`)"
  echo
  echo "| size | op | in flight | ours ops/s | plain TCP ops/s | ratio |"
  echo "|---|---|---:|---:|---:|---:|"
  for i in $(seq "$runs"); do
    jq -r '.throughput[] | [.size, .op, .inflight, .ours_ops_s, .tcp_ops_s, .ratio] | @tsv' "$dir/tcp-$i.json"
  done | summarise
  for i in $(seq "$runs"); do
    jq -r '["8B get p50 µs (lower is better)", "", 1, .latency.ours_p50_us, .latency.tcp_p50_us, .latency.ratio_p50],
      ["64B put pipeline (request/response)", "", .pipeline.depth, .pipeline.ours_ops_s, .pipeline.tcp_ops_s, .pipeline.ratio] | @tsv' "$dir/tcp-$i.json"
  done | summarise
  echo
fi

if [ "$do_shm" = 1 ]; then
  for i in $(seq "$runs"); do
    # --shared-slot: ours moves the same bytes with every operation in
    # flight, as ucx_perftest does (one buffer of the message size); as
    # many operations as UCX's iterations (50,000 at 8 B is 7 ms: its
    # start-up costs would be measured too).
    bench --baseline --backend shm --placement "$placement" --sizes 8B,4KiB --inflight "$inflight" --shared-slot \
      --count "${UCX_OPRATE_ITERS:-1000000}" --json "$dir/shm-$i.json" ${quick[@]+"${quick[@]}"}
    : >"$dir/ucx-$i.tsv"
    if [ "$ucx" = 1 ]; then
      UCX_ITERS=${UCX_OPRATE_ITERS:-1000000} "$here/ucx.sh" --tls sm --placement "$placement" --sizes 8B,4KiB \
        --outstanding "$inflight" --tsv "$dir/ucx-$i.tsv" >&2
    fi
  done
  echo "## shm, $inflight in flight, placement $placement: ours against UCX sm with as many outstanding"
  echo
  echo "Both move one buffer of the operation's size with every operation in flight (ours: --shared-slot)."
  echo
  echo "Reproduce: \`bench/oprate.sh --no-tcp --no-procs --inflight $inflight --placement $placement\` (one run of ours: \`rdmamgr bench --baseline --backend shm --sizes 8B,4KiB --inflight $inflight --shared-slot --count ${UCX_OPRATE_ITERS:-1000000}\`)"
  echo
  echo "| size | op | in flight | ours ops/s | UCX sm ops/s | ours/UCX sm |"
  echo "|---|---|---:|---:|---:|---:|"
  for i in $(seq "$runs"); do
    jq -r '.throughput[] | [.size_bytes, .size, .op, .inflight, .ours_ops_s] | @tsv' "$dir/shm-$i.json" |
      awk -F'\t' -v u="$dir/ucx-$i.tsv" '
        BEGIN { while ((getline l < u) > 0) { split(l, f, "\t"); if (f[4] != "-") m[f[1] "/" f[3]] = f[4] } }
        { k = $1 "/" $3; uo = (k in m) ? m[k] * 1048576 / $1 : 0
          printf "%s\t%s\t%s\t%s\t%s\t%s\n", $2, $3, $4, $5, uo, (uo > 0 ? $5 / uo : 0) }'
  done | summarise
  echo
fi

if [ "$do_procs" = 1 ]; then
  for i in $(seq "$runs"); do
    bench --baseline --procs "$procs" --placement any --sizes 64B,4KiB --inflight "$inflight" --json "$dir/procs-$i.json" \
      ${quick[@]+--count 3000}
  done
  echo "## $procs bench processes against one manager (TCP, placement any), against $procs plain TCP streams"
  echo
  echo "Reproduce: \`bench/oprate.sh --no-tcp --no-shm --procs $procs --inflight $inflight\` (one run: \`rdmamgr bench --baseline --procs $procs --sizes 64B,4KiB\`)"
  echo
  echo "| size | op | in flight per process | ours ops/s (total) | plain TCP ops/s (total) | ratio |"
  echo "|---|---|---:|---:|---:|---:|"
  for i in $(seq "$runs"); do
    jq -r '.throughput[] | [.size, .op, .inflight, .ours_ops_s, .tcp_ops_s, .ratio] | @tsv' "$dir/procs-$i.json"
  done | summarise
  echo
fi
