#!/usr/bin/env bash
# The GPU checks of issue 27, on a machine with a GPU, from the repository
# root, with test/gpu/bin built by test/gpu/run.sh: the driver check, the
# cross-process test (every direction between host and device memory, over
# shm and TCP, bytes checked), then the figures: rdmamgr bench with device
# and host memory at both ends, beside the vendor's own copies (PyTorch,
# where installed) in the same run. Every step's output goes to stdout;
# the exit status is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=test/gpu/bin
rc=0
step() { printf '\n=== %s\n' "$*"; }
nvidia-smi -L 2>/dev/null || true

step "driver: internal/cuda TestOpen"
"$bin/cuda.test" -test.run TestOpen -test.v -test.count=1 || rc=1

step "across processes: test/gpu TestGPUAcrossProcesses (shm and tcp)"
RDMAMGR_BIN="$bin/rdmamgr" "$bin/gpu.test" -test.run 'TestGPUAcrossProcesses' -test.v -test.count=1 -test.timeout=5m || rc=1

# One daemon per backend serving device memory; bench from this process.
bench() { # backend memory op size count
  local addr
  addr=$(sed -n 's/^ready //p' "/tmp/gpu-daemon-$1.out" | head -1)
  "$bin/rdmamgr" bench --peer "$addr" --backend "$1" --memory "$2" --op "$3" --size "$4" --count "$5" 2>&1 |
    grep -E 'MiB/s|route|error' | sed "s|^|$1 $2 $3 $4: |"
}
for be in shm tcp; do
  step "figures: $be"
  "$bin/rdmamgr" serve --cuda --backend "$be" --listen 127.0.0.1:0 --log-level warn >"/tmp/gpu-daemon-$be.out" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q '^ready ' "/tmp/gpu-daemon-$be.out" && break; sleep 0.1; done
  if ! grep -q '^ready ' "/tmp/gpu-daemon-$be.out"; then
    echo "serve --cuda --backend $be did not start:"; cat "/tmp/gpu-daemon-$be.out"; rc=1; continue
  fi
  if [ "$be" = shm ]; then sizes="64MiB 16MiB"; else sizes="1MiB 16MiB"; fi
  for size in $sizes; do
    for op in put get; do
      for mem in cuda:0 host; do bench "$be" "$mem" "$op" "$size" 50 || rc=1; done
    done
  done
  kill "$pid"; wait "$pid" 2>/dev/null
done

step "the vendor's own copies, same run (PyTorch)"
python3 - <<'PY' || echo "no PyTorch with CUDA here: no vendor figures"
import time, torch
def rate(fn, n, reps=20):
    fn(); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(reps): fn()
    torch.cuda.synchronize(); return n * reps / (time.perf_counter() - t) / 2**20
a = torch.empty(64 << 20, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
print("device-to-device copy, 64MiB: %.0f MiB/s" % rate(lambda: b.copy_(a), 64 << 20))
h = torch.empty(16 << 20, dtype=torch.uint8, pin_memory=True); d = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
print("pinned host-to-device, 16MiB: %.0f MiB/s" % rate(lambda: d.copy_(h, non_blocking=True), 16 << 20))
print("device-to-pinned host, 16MiB: %.0f MiB/s" % rate(lambda: h.copy_(d, non_blocking=True), 16 << 20))
PY
exit "$rc"
