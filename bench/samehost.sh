#!/usr/bin/env bash
# The same-host table (README, "Same host"): rdmamgr between two processes on
# this host against a single-thread memcpy of the same size measured in the
# same run (`rdmamgr bench --baseline --against memcpy --json`), and against
# UCX's shared-memory transports (bench/ucx.sh --tls sm and --tls posix,cma)
# at the same sizes and placement. Prints a Markdown table, the 8-byte
# latencies and whether the issue's goals are met.
#
# usage: bench/samehost.sh [--backend shm|tcp] [--placement split|same|any]
#                          [--sizes LIST] [--ops LIST] [--inflight N] [--out DIR] [--no-ucx]
#                          [-- more `rdmamgr bench` flags]
#
#   --backend    our data plane (default shm). The run fails if a route is
#                of another kind (bench checks queuepair.QueuePair.Kind), so
#                a table is never shm's figures taken on TCP; --backend tcp
#                gives the placeholder table of a build without shm
#   --placement  default split: bench (and ucx_perftest's client) on the
#                first allowed CPU, the manager (and ucx_perftest's server)
#                on the second; the memcpy runs in the bench process
#   --sizes      default 8B,4KiB,64KiB,1MiB,16MiB
#   --inflight N operations in flight at sizes up to 4KiB (default 64):
#                ours (`rdmamgr bench --inflight N`) and UCX sm's op rate with
#                as many outstanding (bench/ucx.sh --outstanding N; iterations
#                UCX_OPRATE_ITERS, default 1000000), the "Op rate" table
#   --out DIR    keep ours.json, ucx-*.tsv and the logs there (default: a
#                temporary directory, removed at the end)
#   --no-ucx     ours and memcpy only (UCX columns "-")
#   -- FLAGS     passed to `rdmamgr bench`: e.g. -- --count 200 --lat-count
#                1000 for a short run, --concurrency 2
#
# Environment: RDMAMGR (an rdmamgr binary to use instead of building one);
# UCX_ITERS, UCX_LAT_ITERS, UCX_OUTSTANDING, UCX_REPEAT as for bench/ucx.sh.
# Needs jq (installed with apt-get when missing) and go unless RDMAMGR is set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

backend=shm
placement=split
sizes="8B,4KiB,64KiB,1MiB,16MiB"
ops="put,get"
out=""
ucx=1
inflight=64
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend="$2"; shift 2 ;;
    --backend=*) backend="${1#*=}"; shift ;;
    --placement) placement="$2"; shift 2 ;;
    --placement=*) placement="${1#*=}"; shift ;;
    --sizes) sizes="$2"; shift 2 ;;
    --sizes=*) sizes="${1#*=}"; shift ;;
    --ops) ops="$2"; shift 2 ;;
    --ops=*) ops="${1#*=}"; shift ;;
    --inflight) inflight="$2"; shift 2 ;;
    --inflight=*) inflight="${1#*=}"; shift ;;
    --out) out="$2"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --no-ucx) ucx=0; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "samehost.sh: unknown argument $1 (bench flags go after --)" >&2; exit 2 ;;
  esac
done

if ! command -v jq >/dev/null 2>&1; then
  echo "samehost.sh: jq missing; installing it" >&2
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
  echo "samehost.sh: go build -o $bin ./cmd/rdmamgr" >&2
  (cd "$root" && go build -o "$bin" ./cmd/rdmamgr)
fi

j="$dir/ours.json"
bench_cmd=("$bin" bench --baseline --against memcpy --backend "$backend" --placement "$placement"
  --sizes "$sizes" --ops "$ops" --inflight "$inflight" --json "$j" ${extra[@]+"${extra[@]}"})
echo "samehost.sh: ${bench_cmd[*]}" >&2
"${bench_cmd[@]}" | tee "$dir/bench.log" >&2
got=$(jq -r '"\(.against) \(.backend)"' "$j")
if [ "$got" != "memcpy $backend" ]; then
  echo "samehost.sh: the bench ran against/over $got, not memcpy $backend" >&2
  exit 1
fi

for tls in sm posix,cma; do
  t="$dir/ucx-${tls//,/-}.tsv"
  : >"$t"
  [ "$ucx" = 1 ] || continue
  echo "samehost.sh: $here/ucx.sh --tls $tls --placement $placement --sizes $sizes --ops $ops --latency" >&2
  "$here/ucx.sh" --tls "$tls" --placement "$placement" --sizes "$sizes" --ops "$ops" --latency --tsv "$t" |
    tee "$dir/ucx-${tls//,/-}.log" >&2
done

# UCX sm's op rate at the small sizes, as many outstanding as ours.
small=$(jq -r '[.throughput[] | select(.size_bytes <= 4096) | .size] | unique | join(",")' "$j")
t="$dir/ucx-sm-oprate.tsv"
: >"$t"
if [ "$ucx" = 1 ] && [ -n "$small" ] && [ "$inflight" -gt 0 ]; then
  echo "samehost.sh: $here/ucx.sh --tls sm --placement $placement --sizes $small --ops $ops --outstanding $inflight" >&2
  UCX_ITERS=${UCX_OPRATE_ITERS:-1000000} "$here/ucx.sh" --tls sm --placement "$placement" --sizes "$small" --ops "$ops" \
    --outstanding "$inflight" --tsv "$t" | tee "$dir/ucx-sm-oprate.log" >&2
fi

"$here/samehost-table.sh" "$dir"
repro="bench/samehost.sh"
[ "$backend" != shm ] && repro+=" --backend $backend"
[ "$placement" != split ] && repro+=" --placement $placement"
[ "$sizes" != "8B,4KiB,64KiB,1MiB,16MiB" ] && repro+=" --sizes $sizes"
[ "$ops" != "put,get" ] && repro+=" --ops $ops"
[ "$inflight" != 64 ] && repro+=" --inflight $inflight"
[ "$ucx" = 0 ] && repro+=" --no-ucx"
[ -n "${UCX_REPEAT:-}" ] && repro="UCX_REPEAT=$UCX_REPEAT $repro"
[ ${#extra[@]} -gt 0 ] && repro+=" -- ${extra[*]}"
echo
echo "Reproduce: $repro"
