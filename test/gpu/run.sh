#!/usr/bin/env bash
# Builds what the GPU checks need on a machine with a GPU and no Go
# toolchain (the device machine), into test/gpu/bin (git-ignored): the
# rdmamgr binary and the test binaries of internal/cuda and test/gpu,
# stripped (about 50 MiB together). Then run there, from the repository
# root, carrying test/gpu/bin:   bash test/gpu/device.sh
#
# With --oprate it also carries what issue 25's op-rate tables need
# there (test/gpu/oprate.sh): this machine's ucx_perftest, ucx_info and
# jq with the shared libraries they load that are not the C library's
# own, and UCX's transport modules (test/gpu/bin/carry, about 4 MiB;
# apt-get install ucx-utils jq first).
#
# With --base REV (which implies --oprate) it also builds REV's rdmamgr
# as test/gpu/bin/rdmamgr-base, for test/gpu/ab.sh (this tree's build
# against REV's, alternated run by run on the device), and leaves out
# the two test binaries (the carry limit is 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=test/gpu/bin
oprate=0 base=""
while [ $# -gt 0 ]; do
  case "$1" in
    --oprate) oprate=1; shift ;;
    --base) base=$2; oprate=1; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
go build -ldflags='-s -w' -o "$out/rdmamgr" ./cmd/rdmamgr
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!test/gpu/bin' || echo +changes)" >"$out/rdmamgr.rev"
rm -f "$out/rdmamgr-base" "$out/rdmamgr-base.rev"
if [ -n "$base" ]; then
  rm -f "$out/cuda.test" "$out/gpu.test"
  wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$base"
  (cd "$wt" && go build -ldflags='-s -w' -o "$OLDPWD/$out/rdmamgr-base" ./cmd/rdmamgr) || { git worktree remove --force "$wt"; exit 1; }
  git worktree remove --force "$wt"
  git rev-parse --short "$base" >"$out/rdmamgr-base.rev"
else
  go test -c -ldflags='-s -w' -o "$out/cuda.test" ./internal/cuda
  go test -c -ldflags='-s -w' -o "$out/gpu.test" ./test/gpu
fi
if [ "$oprate" = 1 ]; then
  carry=$out/carry
  rm -rf "$carry"; mkdir -p "$carry/bin" "$carry/lib"
  for tool in ucx_perftest ucx_info jq; do
    p=$(command -v "$tool") || { echo "run.sh: --oprate needs $tool (apt-get install ucx-utils jq)" >&2; exit 1; }
    cp "$p" "$carry/bin/"
  done
  mods=$(dirname "$(ldd "$(command -v ucx_perftest)" | awk '/libucs\.so/ {print $3}')")/ucx
  [ -d "$mods" ] && cp -r "$mods" "$carry/lib/ucx"
  # every shared library they load, but the C library's own (the device has those)
  for f in "$carry"/bin/* "$carry"/lib/ucx/*; do
    [ -f "$f" ] && ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
  done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' | while read -r lib; do
    cp -L "$lib" "$carry/lib/"
  done
fi
du -sh "$out"
if [ -n "$base" ]; then
  echo "now, on the device machine, from the repository root (carry $out): bash test/gpu/ab.sh [--profile]"
  exit 0
fi
echo "now, on the GPU machine, from the repository root: bash test/gpu/device.sh (carry $out)"
[ "$oprate" = 1 ] && echo "and for issue 25's tables there: bash test/gpu/oprate.sh"
exit 0
