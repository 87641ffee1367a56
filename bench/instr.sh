#!/usr/bin/env bash
# Instructions per operation of a Go benchmark, counted by valgrind's
# callgrind: exact and repeatable where wall-clock figures on a shared VM
# move by 2x from run to run. It builds the package's test binary, runs
# the benchmark for N iterations under callgrind (collecting only inside
# the function matching --collect: by default, for BENCH-REGEX Name/sub,
# the closure Name passes to b.Run (BenchmarkName.func1), so set-up
# before it is left out; for Name alone, BenchmarkName), and prints each
# function's own instructions divided by N, the largest first, then the
# total. Set-up inside the collected closure is counted too: keep N large
# (the default 1,000,000) so it is a small share.
#
# usage: bench/instr.sh [--n N] [--collect PATTERN] [--lines FILE-REGEX] PACKAGE BENCH-REGEX
#
#   PACKAGE       a Go package (./backend/shm)
#   BENCH-REGEX   passed to -test.bench (one benchmark: 'CQ/write/8$')
#   --n N         iterations (-test.benchtime Nx; default 1000000)
#   --collect P   callgrind --toggle-collect pattern (default above); it
#                 must match one function of the call path only: each
#                 entry toggles collection
#   --lines RE    also print the source lines (of files matching RE) that
#                 cost at least 1 instruction per operation
#   --min X       leave out functions under X per operation (default 0.5)
#
# Example: bench/instr.sh ./backend/shm 'CQ/write/8$'
# Needs valgrind (apt-get install valgrind) and python3. GOMAXPROCS=1 and
# no asynchronous preemption (callgrind does not survive its signals).
set -euo pipefail
n=1000000
collect=""
lines=""
min=0.5
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n="$2"; shift 2 ;;
    --collect) collect="$2"; shift 2 ;;
    --lines) lines="$2"; shift 2 ;;
    --min) min="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "instr.sh: unknown flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || { echo "usage: bench/instr.sh [--n N] [--collect PATTERN] [--lines RE] PACKAGE BENCH-REGEX" >&2; exit 2; }
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "instr.sh: --n $n: want a positive number" >&2; exit 2; }
pkg=$1; re=$2
if [ -z "$collect" ]; then
  top=${re%%/*}; top=${top#^}; top=${top%\$}; top=${top#Benchmark}
  [[ "$top" =~ ^[A-Za-z0-9_]+$ ]] || { echo "instr.sh: cannot tell the benchmark's function from $re: give --collect" >&2; exit 2; }
  collect="*.Benchmark$top"
  [[ "$re" == */* ]] && collect="$collect.func1"
fi
for tool in valgrind callgrind_annotate python3 go; do
  command -v "$tool" >/dev/null 2>&1 || { echo "instr.sh: needs $tool${tool/valgrind/ (apt-get install valgrind)}" >&2; exit 1; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/bench.test" "$pkg"
pkgdir=$(go list -f '{{.Dir}}' "$pkg")
(cd "$pkgdir" && GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --toggle-collect="$collect" \
  --callgrind-out-file="$dir/cg.out" "$dir/bench.test" -test.run '^$' -test.bench "$re" -test.benchtime "${n}x" >"$dir/log" 2>&1) || {
  echo "instr.sh: the benchmark failed under callgrind:" >&2; tail -20 "$dir/log" >&2; exit 1; }
grep -q '^Benchmark' "$dir/log" || { echo "instr.sh: no benchmark matched $re" >&2; exit 1; }
callgrind_annotate --threshold=100 "$dir/cg.out" >"$dir/funcs" 2>/dev/null
[ -z "$lines" ] || callgrind_annotate --auto=yes "$dir/cg.out" >"$dir/lines" 2>/dev/null
grep '^Benchmark' "$dir/log" | sed 's/^/# /'
python3 - "$n" "$min" "$dir/funcs" "$lines" "$dir/lines" <<'PY'
import re, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
n, least, funcs, lre, lfile = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
per = {}
for l in open(funcs):
    m = re.match(r'\s*([\d,]+) \(.*?\)\s+\S+?:(\S+)', l)
    if m and re.match(r'[A-Za-z_]', m.group(2)):  # a function (not a source line callgrind names as one)
        k = re.sub(r"'\d+", "", m.group(2))  # recursion levels are one function
        per[k] = per.get(k, 0) + int(m.group(1).replace(',', ''))
print("| instructions per operation | function |")
print("|---:|---|")
for k in sorted(per, key=lambda k: -per[k]):
    if per[k] / n >= least:
        print(f"| {per[k] / n:.1f} | {k} |")
print(f"| {sum(per.values()) / n:.1f} | total |")
if lre:
    print()
    cur = None
    for l in open(lfile):
        m = re.match(r'-- Auto-annotated source: (\S+)', l)
        if m:
            cur = m.group(1)
            continue
        m = re.match(r'\s*([\d,]+) \([ \d.]+%\)\s\s(.*)', l)
        if m and cur and re.search(lre, cur) and not m.group(2).startswith('=>'):
            v = int(m.group(1).replace(',', '')) / n
            if v >= 1:
                print(f"{v:6.1f} {cur.split('/')[-1]}: {m.group(2).strip()}")
PY
