#!/usr/bin/env bash
# A/B of two builds of rdmamgr on the device machine (many cores, no Go),
# from the repository root, with test/gpu/bin built here by
# `bash test/gpu/run.sh --oprate --base REV` and carried there: this
# tree's rdmamgr against REV's (test/gpu/bin/rdmamgr-base), run by run
# alternated, so both see the same machine (its speed moves from one
# start to the next by more than most changes). For each row, the ratio
# of every run of each build and its median:
#   pipe-split, pipe-any: the TCP 64 B pipeline, 64 in flight
#     (rdmamgr bench --baseline --backend tcp --sizes 64B --ops put
#     --inflight 64 --placement P: its "pipeline:" line);
#   small-split, small-any: 8 B and 64 B Put and Get, 64 in flight;
#   procs: 8 bench processes against one daemon, 4 KiB Put and Get;
#   lat-split, lat-any: the TCP 8 B Get alone in flight, p50 over the
#     plain ping-pong's (its "latency:" line; label 8B-get-p50) and ours
#     alone in µs (8B-get-p50-us);
#   shm-lat: the shm 8 B Get alone in flight at split, its p50 in µs
#     (the report's .latency.ours_p50_us; label 8B-get-p50-us).
# A run that reports failed operations gives no figures. Builds before
# 08eb497 time each operation with time.Now, later ones with the CPU's
# counter (internal/cycles): against such a base the latency rows carry
# the clock's change too (tens of nanoseconds; 20 ns here, 35 on 16
# cores, per interval).
# With --profile it also writes CPU profiles of this tree's build, the
# daemon and the bench of the 64 B pipeline at split (2,000,000 Puts;
# serve-pipe-split.prof and bench-pipe-split.prof: read them here with
# go tool pprof). Everything goes to stdout and, where $OUT is set, to
# $OUT/ab.log (the device tool brings back at most a few files).
#
# usage: bash test/gpu/ab.sh [--pairs N] [--rows LIST] [--profile] [--quick]
#   --pairs N   alternated pairs per row (default 5)
#   --rows LIST comma-separated rows (default all: pipe-split,pipe-any,
#               small-split,small-any,procs,lat-split,lat-any,shm-lat)
#   --quick     short runs, to check the script (one pair, few operations)
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/test/gpu/bin
a=$bin/rdmamgr b=$bin/rdmamgr-base
if [ -d "$bin/carry" ]; then # jq (run.sh --oprate carries it)
  export PATH=$bin/carry/bin:$PATH LD_LIBRARY_PATH=$bin/carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
pairs=5 rows=pipe-split,pipe-any,small-split,small-any,procs,lat-split,lat-any,shm-lat profile=0 quick=()
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) pairs=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --profile) profile=1; shift ;;
    --quick) quick=(--count 3000 --lat-count 200 --warmup 10); pairs=1; shift ;;
    *) echo "ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for f in "$a" "$b"; do
  [ -x "$f" ] || { echo "ab.sh: no $f: run bash test/gpu/run.sh --oprate --base REV where Go is" >&2; exit 1; }
done
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
log=$out/ab.log
: >"$log"
say() { echo "$*" | tee -a "$log"; }
say "# ab.sh $(date -u +%FT%TZ), $(nproc) CPUs: $(cat "$bin/rdmamgr.rev" 2>/dev/null || echo this tree) (a) against $(cat "$bin/rdmamgr-base.rev" 2>/dev/null || echo base) (b)"

# run ROW BINARY: one run's ratios, as "label ratio" lines
run() {
  local row=$1 exe=$2 args=()
  case $row in
    pipe-split|pipe-any) args=(--backend tcp --placement "${row#pipe-}" --sizes 64B --ops put --inflight 64) ;;
    small-split|small-any) args=(--backend tcp --placement "${row#small-}" --sizes 8B,64B --inflight 64) ;;
    procs) args=(--procs 8 --sizes 4KiB --inflight 64) ;;
    lat-split|lat-any) args=(--backend tcp --placement "${row#lat-}" --sizes 8B --ops get --count 2000 --lat-count 5000) ;;
    shm-lat)
      local j
      j=$(mktemp)
      timeout 120 "$exe" bench --baseline --backend shm --placement split --sizes 8B --ops get --count 2000 --lat-count 20000 \
        --json "$j" "${quick[@]}" >/dev/null 2>&1 &&
        jq -r '.latency | select(.errors == 0) | "8B-get-p50-us \(.ours_p50_us)"' "$j"
      rm -f "$j"
      return ;;
    *) echo "ab.sh: unknown row $row" >&2; return 2 ;;
  esac
  timeout 120 "$exe" bench --baseline "${args[@]}" "${quick[@]}" 2>&1 |
    awk -v row="$row" '
      function out(l) { lines = lines l "\n" }
      END { if (errs + 0 == 0) printf "%s", lines }
      /^errors:/ {errs = $2}
      /^pipeline:/ && row ~ /^pipe/ {out("64B-pipeline " $NF)}
      function us(x) { sub(/;$/, "", x)
        if (x ~ /µs$/) { sub(/µs$/, "", x); return x + 0 }
        if (x ~ /ns$/) { sub(/ns$/, "", x); return x / 1000 }
        if (x ~ /ms$/) { sub(/ms$/, "", x); return x * 1000 }
        if (x ~ /s$/) { sub(/s$/, "", x); return x * 1000000 }
        return x + 0 }
      /^latency:/ && row ~ /^lat/ {for (i = 2; i < NF; i++) {
        if ($i == "p50" && $(i-1) == "ratio") {v = $(i+1); sub(/;$/, "", v); out("8B-get-p50 " v)}
        if ($i == "p50" && $(i-1) == "ours") out("8B-get-p50-us " us($(i+1))) }}
      /^(8B|64B|4KiB) / && row !~ /^(pipe|lat)/ {out($1 "-" $2 " " $NF)}'
}

rc=0
IFS=, read -ra list <<<"$rows"
for row in "${list[@]}"; do
  t=$(mktemp)
  for i in $(seq "$pairs"); do
    for side in a b; do
      exe=$a; [ $side = b ] && exe=$b
      r=$(run "$row" "$exe") || rc=1
      [ -n "$r" ] || { say "$row $side: no result"; rc=1; }
      echo "$r" | awk -v s=$side 'NF == 2 {print $1, s, $2}' >>"$t"
    done
  done
  # per label and side: every ratio in run order, then the median
  sort -s -k1,1 -k2,2 "$t" | awk -v row="$row" '
    function flush() { if (n) { m = (n % 2) ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
        printf "%s %s %s: %s (median %.2f)\n", row, key, side, list, m } }
    { k = $1 " " $2
      if (k != cur) { flush(); cur = k; key = $1; side = $2; n = 0; list = "" }
      list = list (n ? ", " : "") $3; n++; v[n] = $3
      for (i = n; i > 1 && v[i] < v[i-1]; i--) { x = v[i]; v[i] = v[i-1]; v[i-1] = x } }
    END { flush() }' | tee -a "$log"
  rm -f "$t"
done

if [ "$profile" = 1 ]; then
  count=2000000
  [ ${#quick[@]} -gt 0 ] && count=20000
  port=$((20000 + RANDOM % 20000))
  so=$(mktemp)
  taskset -c 1 "$a" serve --listen 127.0.0.1:$port --backend tcp --cpuprofile "$out/serve-pipe-split.prof" >"$so" 2>&1 &
  sp=$!
  for k in $(seq 100); do grep -q '^ready' "$so" && break; sleep 0.1; done
  GOMAXPROCS=1 taskset -c 0 timeout 120 "$a" bench --peer 127.0.0.1:$port --op put --size 64 \
    --inflight 64 --count $count --cpuprofile "$out/bench-pipe-split.prof" 2>&1 | grep -E 'throughput|errors' | tee -a "$log"
  kill -INT $sp
  wait $sp || rc=1 # serve exits 0 on SIGINT; its profile is written then
  rm -f "$so"
  say "profiles: $out/serve-pipe-split.prof $out/bench-pipe-split.prof"
fi
exit $rc
