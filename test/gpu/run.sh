#!/usr/bin/env bash
# Builds what the GPU checks need on a machine with a GPU and no Go
# toolchain (the device machine), into test/gpu/bin (git-ignored): the
# rdmamgr binary and the test binaries of internal/cuda and test/gpu,
# stripped (about 50 MiB together). Then run there, from the repository
# root, carrying test/gpu/bin:   bash test/gpu/device.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=test/gpu/bin
mkdir -p "$out"
go build -ldflags='-s -w' -o "$out/rdmamgr" ./cmd/rdmamgr
go test -c -ldflags='-s -w' -o "$out/cuda.test" ./internal/cuda
go test -c -ldflags='-s -w' -o "$out/gpu.test" ./test/gpu
du -sh "$out"
echo "now, on the GPU machine, from the repository root: bash test/gpu/device.sh (carry $out)"
