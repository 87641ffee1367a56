#!/usr/bin/env bash
# Issue 25's op-rate goals on the device machine (many cores, no Go), from
# the repository root, with test/gpu/bin built here by
# `bash test/gpu/run.sh --oprate` and carried there: the tables of
# README "Small operations" for a machine with more cores, each command
# as the README gives it, under a time limit so that one call of the
# device tool holds them all (about 6 minutes):
#   1. shm against UCX sm and TCP against plain Go, placement split;
#   2. TCP at placement any;
#   3. TCP 4 KiB-16 MiB against the plain stream, split and any;
#   4. 8 bench processes against one daemon.
# Every step's output goes to stdout and, where $OUT is set (the device
# tool's folder that comes back), to $OUT/oprate-*.log. The exit status
# is 1 when a step failed or ran out of time. --quick: each step short
# (one run, few operations), to check the script, not for figures.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/test/gpu/bin
carry=$bin/carry
[ -x "$bin/rdmamgr" ] || { echo "oprate.sh: no $bin/rdmamgr: run bash test/gpu/run.sh --oprate where Go is" >&2; exit 1; }
export RDMAMGR=$bin/rdmamgr
if [ -d "$carry" ]; then
  export PATH=$carry/bin:$PATH LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
out=${OUT:-}
rc=0
q=() runs=3 rruns=2 sizes=()
if [ "${1:-}" = --quick ]; then
  q=(--quick) runs=1 rruns=1 sizes=(--sizes 64KiB)
fi
nproc
step() { # name seconds command...
  local name=$1 secs=$2 s log=/dev/null
  shift 2
  [ -n "$out" ] && log=$out/oprate-$name.log
  printf '\n=== %s: %s\n' "$name" "$*"
  s=$(date +%s)
  timeout "$secs" "$@" 2>&1 | tee "$log"
  local st=${PIPESTATUS[0]}
  echo "--- $name: exit $st in $(( $(date +%s) - s ))s"
  [ "$st" -eq 0 ] || rc=1
}
step split 120 bash bench/oprate.sh "${q[@]}" --no-procs --runs $runs
step any 60 bash bench/oprate.sh "${q[@]}" --no-procs --no-shm --placement any --runs $runs
step tput-split 75 bash bench/repeat.sh --runs $rruns -- --placement split --backend tcp "${sizes[@]}"
step tput-any 75 bash bench/repeat.sh --runs $rruns -- --placement any --backend tcp "${sizes[@]}"
step procs 60 bash bench/oprate.sh "${q[@]}" --no-tcp --no-shm --procs 8 --runs $runs
exit "$rc"
