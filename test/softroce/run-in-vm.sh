#!/usr/bin/env bash
# run-in-vm.sh -- run a host-built program against a real ibverbs stack
# (Soft-RoCE, the rdma_rxe kernel module) inside a throw-away qemu VM that
# boots Debian's own stock kernel from an initramfs.
#
# rdmamgr's copy of the Soft-RoCE recipe (shared/softroce): test/softroce/ci.sh
# runs the ibverbs backend's tests with it. It keeps its own cache
# (/tmp/rdmamgr-softroce) because the cache stamp includes this script's hash.
#
# Why: CI machines usually have no RDMA NIC, and often a kernel without
# CONFIG_INFINIBAND (so `rdma link add ... type rxe` is impossible on the host).
# Debian's linux-image-amd64 ships ib_core / ib_uverbs / rdma_ucm / rdma_rxe as
# modules, so we boot that kernel under qemu, load the modules, attach an rxe
# device (rxe0) to a netdev with an IPv4 address and run the given command.
#
# Usage:
#   run-in-vm.sh [-v] PAYLOAD [--] COMMAND...
#
#   PAYLOAD   a host file or directory copied to /opt/app inside the VM
#             (ELF files in it get their shared-library dependencies copied
#             too, found with ldd). Use '-' for no payload.
#   COMMAND   what to run inside the VM, in /opt/app, after rxe0 is ACTIVE.
#             One argument = a shell command line (run with /bin/sh -c, dash);
#             several arguments = an argv (each word quoted, no shell syntax).
#             Its stdout+stderr are printed here (stdin is /dev/null); this
#             script exits with its exit status.
#   -v        also show the VM's console (kernel log + init log) on stderr.
#
# Inside the VM the command sees:
#   RXE_DEV=rxe0  RXE_NETDEV=<netdev>  RXE_IP=<ipv4 of netdev>
#   RXE_GID_INDEX=<index of the IPv4-mapped RoCEv2 GID of rxe0 port 1>
#   PATH includes /opt/app and /opt/app/bin; you are root; memlock unlimited.
#   Tools available: busybox, ip, rdma, ibv_devinfo, ibv_*_pingpong,
#   perftest (ib_write_bw, ib_read_bw, ib_atomic_bw, ...), rdmacm-utils
#   (rping, ucmatose, ...).
#
# Environment (all optional):
#   SOFTROCE_CACHE       cache dir for kernel + base initramfs   [/tmp/rdmamgr-softroce]
#   SOFTROCE_TIMEOUT     wall-clock limit for the whole VM run, s [900]
#   SOFTROCE_MEM         guest memory                            [2G]
#   SOFTROCE_SMP         guest vCPUs                             [2]
#   SOFTROCE_ACCEL       auto | kvm | tcg                        [auto]
#   SOFTROCE_KVM_BOOT_S  with auto: seconds to wait for a KVM guest to reach
#                        its init before falling back to TCG     [30]
#   SOFTROCE_NETDEV      netdev rxe0 is attached to: dummy | veth | virtio | lo [dummy]
#                        (virtio = virtio-net NIC on qemu user networking
#                        with restrict=on, i.e. no route out of the VM)
#   SOFTROCE_MTU         MTU to set on that netdev (rxe active_mtu follows it;
#                        e.g. 9000 gives rxe MTU 4096)           [unset: netdev default]
#   SOFTROCE_KERNEL_PKG  kernel package, e.g. linux-image-6.1.0-56-amd64
#                        [the dependency of linux-image-amd64 in the apt lists]
#   SOFTROCE_NO_INSTALL  1 = never call apt-get                  [0]
#   SOFTROCE_KEEP        1 = keep the per-run work dir (logs, initrd) [0]
#   SOFTROCE_APPEND      extra kernel command-line arguments     []
#   SOFTROCE_ENV         space-separated NAME=VALUE words exported to the
#                        command inside the VM (no spaces in values) []
#
# Exit status: the command's exit status; 124 if SOFTROCE_TIMEOUT was hit;
# 125 if the VM failed before/while setting up rxe0 (console tail is shown).
set -euo pipefail

SCRIPT_VERSION=6   # bump to invalidate cached base initramfs images
CACHE=${SOFTROCE_CACHE:-/tmp/rdmamgr-softroce}
TIMEOUT=${SOFTROCE_TIMEOUT:-900}
MEM=${SOFTROCE_MEM:-2G}
SMP=${SOFTROCE_SMP:-2}
ACCEL=${SOFTROCE_ACCEL:-auto}
KVM_BOOT_S=${SOFTROCE_KVM_BOOT_S:-30}
NETDEV=${SOFTROCE_NETDEV:-dummy}
MTU=${SOFTROCE_MTU:-}
KPKG=${SOFTROCE_KERNEL_PKG:-}
VERBOSE=0

log() { echo "softroce: $*" >&2; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }   # seconds since $1
die() { log "error: $*"; exit 125; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2; exit 2; }

# ---------------------------------------------------------------- arguments
while [ $# -gt 0 ]; do
  case "$1" in
    -v) VERBOSE=1; shift ;;
    -h|--help) usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
PAYLOAD=$1; shift
[ "${1:-}" = "--" ] && shift
[ $# -ge 1 ] || usage
# One argument: a shell command line, passed as is. Several: an argv, each
# word single-quoted so that spaces and metacharacters survive.
if [ $# -eq 1 ]; then
  CMDLINE=$1
else
  CMDLINE=""
  for w in "$@"; do CMDLINE="$CMDLINE '$(printf %s "$w" | sed "s/'/'\\\\''/g")'"; done
fi
if [ "$PAYLOAD" != "-" ] && [ ! -e "$PAYLOAD" ]; then die "payload '$PAYLOAD' does not exist"; fi
case "$NETDEV" in dummy|veth|virtio|lo) ;; *) die "SOFTROCE_NETDEV must be dummy|veth|virtio|lo" ;; esac

# ---------------------------------------------------------------- host packages
# Everything comes from the Debian archive. qemu + busybox-static build/boot
# the VM; the rdma user space is copied from the host into the initramfs.
PKGS=(qemu-system-x86 busybox-static ibverbs-utils ibverbs-providers libibverbs1
      perftest rdmacm-utils iproute2 cpio kmod gzip)
install_pkgs() {
  local missing=() p
  for p in "${PKGS[@]}"; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "${SOFTROCE_NO_INSTALL:-0}" = 1 ] && die "missing packages: ${missing[*]} (SOFTROCE_NO_INSTALL=1)"
  [ "$(id -u)" = 0 ] || die "missing packages: ${missing[*]}; run as root or install them"
  log "installing: ${missing[*]}"
  mkdir -p "$CACHE"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
         --no-install-recommends "${missing[@]}"; } > "$CACHE/apt.log" 2>&1; then
    tail -n 20 "$CACHE/apt.log" >&2; die "apt-get failed (log: $CACHE/apt.log)"
  fi
}
install_pkgs

# ---------------------------------------------------------------- kernel choice
if [ -z "$KPKG" ]; then
  KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [ -z "$KPKG" ] && [ "${SOFTROCE_NO_INSTALL:-0}" != 1 ]; then
    apt-get update -qq >/dev/null
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
  [ -n "$KPKG" ] || die "cannot resolve linux-image-amd64; set SOFTROCE_KERNEL_PKG"
fi
KVER=${KPKG#linux-image-}
KDIR=$CACHE/$KVER
mkdir -p "$KDIR"

# The cache key: script version + kernel package version + versions of the
# user-space packages copied in. Any change rebuilds the base image.
stamp() {
  echo "script=$SCRIPT_VERSION"
  sha256sum "$0" "$(dirname "$0")/guest-init.sh" | awk '{print "sha256=" $1}'
  apt-cache policy "$KPKG" 2>/dev/null | awk '/Candidate:/{print "kernel=" $2}'
  dpkg-query -W -f='${Package}=${Version}\n' busybox-static ibverbs-utils ibverbs-providers \
    libibverbs1 librdmacm1 perftest rdmacm-utils iproute2 libc6 2>/dev/null
}

# copy_elf ROOT FILE...: copy FILEs (following symlinks) to the same absolute
# path under ROOT, plus every shared library ldd reports for them.
copy_elf() {
  local root=$1 f lib; shift
  for f in "$@"; do
    cp -L --parents "$f" "$root/"
    # ldd prints "name => /path (addr)" or "/path (addr)" for the loader.
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\//{print $1}' | while read -r lib; do
      [ -e "$root$lib" ] || cp -L --parents "$lib" "$root/"
    done
  done
}

is_elf() { [ -f "$1" ] && [ "$(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

# ---------------------------------------------------------------- base image
build_base() {
  local t0 b k st m ko f
  t0=$(date +%s.%N)
  rm -rf "$CACHE"/build.*          # leftovers of an interrupted build (we hold the lock)
  b=$(mktemp -d "$CACHE/build.XXXXXX")
  k=$b/k; st=$b/root
  log "building base image for $KPKG in $KDIR (one-off)"

  # 1. the kernel package: downloaded (not installed) and unpacked.
  ( cd "$b" && apt-get download -qq "$KPKG" 2>/dev/null ) || die "apt-get download $KPKG failed"
  dpkg -x "$b"/"$KPKG"_*.deb "$k"
  depmod -b "$k" "$KVER"        # the .deb ships no modules.dep

  # 2. skeleton of a usr-merged root.
  mkdir -p "$st"/{usr/bin,usr/sbin,usr/lib,usr/lib64,proc,sys,dev,tmp,run,root,etc/softroce,opt/app,var/tmp}
  ln -s usr/bin "$st/bin"; ln -s usr/sbin "$st/sbin"
  ln -s usr/lib "$st/lib"; ln -s usr/lib64 "$st/lib64"

  # 3. modules, in dependency order (modprobe --show-depends against the
  #    unpacked tree). Compressed modules are decompressed for busybox insmod.
  : > "$st/etc/softroce/modules.list"
  # crc32_generic/crc32-pclmul: rxe allocates the "crc32" crypto shash when a
  # device is added; without them `rdma link add` fails with ENOENT because
  # the crypto layer cannot autoload them (no kmod modprobe in the VM).
  for m in crc32_generic crc32-pclmul rdma_rxe ib_uverbs rdma_ucm dummy veth virtio_pci virtio_net; do
    modprobe -d "$k" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
  done | awk '!seen[$0]++' | while read -r ko; do
    f=${ko#"$k"}                                  # /lib/modules/<kver>/...
    mkdir -p "$st$(dirname "$f")"
    case "$f" in
      *.ko.xz)  xz -dc "$ko"   > "$st${f%.xz}";  f=${f%.xz} ;;
      *.ko.zst) zstd -qdc "$ko" > "$st${f%.zst}"; f=${f%.zst} ;;
      *.ko.gz)  gzip -dc "$ko" > "$st${f%.gz}";  f=${f%.gz} ;;
      *)        cp "$ko" "$st$f" ;;
    esac
    echo "$f" >> "$st/etc/softroce/modules.list"
  done
  cp "$k/boot/vmlinuz-$KVER" "$b/vmlinuz"

  # 4. user space from the host: busybox (static) + rdma tools + their libs.
  cp /bin/busybox "$st/usr/bin/busybox"
  local bins=()
  for f in $(dpkg -L ibverbs-utils perftest rdmacm-utils | grep -E '^/usr/s?bin/'); do
    [ -f "$f" ] && is_elf "$f" && bins+=("$f")
  done
  # iproute2 (ip, rdma), dash as /bin/sh and bash: busybox's own sh prefers
  # its applets over PATH, which would shadow e.g. iproute2's ip.
  for f in ip rdma dash bash; do bins+=("$(readlink -f "$(command -v $f)")"); done
  # glibc dlopen()s libgcc_s for pthread_exit/pthread_cancel (rping needs it);
  # ldd does not list it.
  f=$(ldconfig -p | awk '/libgcc_s\.so\.1 .*x86-64/{print $NF; exit}')
  [ -n "$f" ] && bins+=("$f")
  copy_elf "$st" "${bins[@]}"
  ln -sf dash "$st/usr/bin/sh"
  [ -e "$st/usr/sbin/ip" ] || ln -s ../bin/ip "$st/usr/sbin/ip"
  # the rxe provider is dlopen()ed by libibverbs, so ldd cannot see it.
  for f in $(dpkg -L ibverbs-providers | grep -E 'librxe-rdmav[0-9]+\.so$|/rxe\.driver$'); do
    if is_elf "$f"; then copy_elf "$st" "$f"; else cp --parents "$f" "$st/"; fi
  done

  # 5. minimal /etc; ld.so.cache so the loader finds everything.
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$st/etc/passwd"
  printf 'root:x:0:\n' > "$st/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' > "$st/etc/hosts"
  printf 'passwd: files\ngroup: files\nhosts: files\n' > "$st/etc/nsswitch.conf"
  find "$st/usr/lib" "$st/usr/lib64" -name '*.so*' -printf '%h\n' | sed "s|^$st||" | sort -u > "$st/etc/ld.so.conf"
  ldconfig -r "$st" 2>/dev/null || true

  # 6. PID 1.
  cp "$(dirname "$0")/guest-init.sh" "$st/init"
  chmod 755 "$st/init"
  sed -i "s|@KVER@|$KVER|g" "$st/init"

  # 7. pack. gzip -1: the kernel decompresses it under TCG, keep that cheap.
  ( cd "$st" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1 ) > "$b/base.cpio.gz"
  mv "$b/vmlinuz" "$KDIR/vmlinuz"
  mv "$b/base.cpio.gz" "$KDIR/base.cpio.gz"
  stamp > "$KDIR/stamp"
  rm -rf "$b"
  log "base image built in $(since "$t0")s ($(du -h "$KDIR/base.cpio.gz" | cut -f1) initramfs)"
}

# Rebuild only if missing or stale; flock guards concurrent runs sharing a cache.
exec 9>"$KDIR/.lock"
flock 9
if [ ! -s "$KDIR/base.cpio.gz" ] || [ ! -s "$KDIR/vmlinuz" ] || ! cmp -s <(stamp) "$KDIR/stamp"; then
  build_base
fi
flock -u 9

# ---------------------------------------------------------------- per-run image
WORK=$(mktemp -d /tmp/softroce-run.XXXXXX)
QPID=""; TPIDS=()
cleanup() {
  local rc=$?
  if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then
    kill "$QPID" 2>/dev/null || true; sleep 0.5; kill -9 "$QPID" 2>/dev/null || true
  fi
  for p in "${TPIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ "${SOFTROCE_KEEP:-0}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

T_RUN0=$(date +%s.%N); T_RUN0_S=${T_RUN0%.*}
A=$WORK/app
mkdir -p "$A/opt/app" "$A/etc/softroce" "$A"/usr/{bin,sbin,lib,lib64}
# Same usr-merge symlinks as the base image: a real "lib" directory in this
# second archive would make the kernel replace the /lib symlink of the first.
ln -s usr/bin "$A/bin"; ln -s usr/sbin "$A/sbin"; ln -s usr/lib "$A/lib"; ln -s usr/lib64 "$A/lib64"
if [ "$PAYLOAD" != "-" ]; then
  if [ -d "$PAYLOAD" ]; then cp -a "$PAYLOAD/." "$A/opt/app/"; else cp -L "$PAYLOAD" "$A/opt/app/"; fi
  # shared-library dependencies of every ELF in the payload
  while IFS= read -r -d '' f; do
    is_elf "$f" || continue
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\//{print $1}' | while read -r lib; do
      [ -e "$A$lib" ] || cp -L --parents "$lib" "$A/"
    done
  done < <(find "$A/opt/app" -type f -print0)
fi
printf '%s\n' "$CMDLINE" > "$A/etc/softroce/cmd"
{
  echo "SOFTROCE_NETDEV=$NETDEV"
  echo "SOFTROCE_MTU=$MTU"
} > "$A/etc/softroce/run.conf"
: > "$A/etc/softroce/env"
for kv in ${SOFTROCE_ENV:-}; do
  case "$kv" in
    [A-Za-z_]*=*) printf 'export %s\n' "$(printf %s "$kv" | sed "s/=\(.*\)/='\1'/")" >> "$A/etc/softroce/env" ;;
    *) die "SOFTROCE_ENV: '$kv' is not NAME=VALUE" ;;
  esac
done
# A second cpio appended to the base one: the kernel unpacks both in order.
( cd "$A" && find . | cpio -o -H newc --quiet | gzip -1 ) > "$WORK/app.cpio.gz"
cat "$KDIR/base.cpio.gz" "$WORK/app.cpio.gz" > "$WORK/initrd"
log "per-run initramfs ready in $(since "$T_RUN0")s (payload archive $(du -h "$WORK/app.cpio.gz" | cut -f1))"

# ---------------------------------------------------------------- accelerator
pick_accel() {
  case "$ACCEL" in
    kvm|tcg) echo "$ACCEL"; return ;;
  esac
  # KVM needs a usable /dev/kvm. (Some sandboxes expose a /dev/kvm that cannot
  # run a stock kernel -- e.g. PVM-based nested KVM; the boot watchdog below
  # falls back to TCG in that case.)
  # A CPU without vmx/svm flags but with a /dev/kvm (PVM) is skipped up front.
  if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
    echo kvm
  else
    echo tcg
  fi
}

# ---------------------------------------------------------------- boot
check_rxe_up() {  # log (once) the wall time from qemu start to rxe0 ACTIVE
  if [ "$rxeup" = 0 ] && grep -q SOFTROCE_RXE_UP "$WORK/status.log" 2>/dev/null; then
    rxeup=1; log "[$acc] rxe0 up after $(since "$T_QEMU")s (qemu start -> rxe0 ACTIVE, wall)"
  fi
}
run_vm() {  # $1 = accel; sets QPID, returns qemu's exit status via VM_RC
  local acc=$1 cpu net=() t0 now booted=0 rxeup=0
  if [ "$acc" = kvm ]; then cpu=host; accopt=kvm; else cpu=max; accopt=tcg,thread=multi; fi
  if [ "$NETDEV" = virtio ]; then
    # user-mode networking, restrict=on: the guest can reach nothing outside.
    net=(-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0,romfile=)
  fi
  : > "$WORK/console.log"; : > "$WORK/output.log"; : > "$WORK/status.log"
  qemu-system-x86_64 -accel "$accopt" -cpu "$cpu" -m "$MEM" -smp "$SMP" \
    -nodefaults -no-reboot -display none -monitor none \
    -kernel "$KDIR/vmlinuz" -initrd "$WORK/initrd" \
    -append "console=ttyS0 panic=-1 loglevel=4 ${SOFTROCE_APPEND:-}" \
    -serial "file:$WORK/console.log" \
    -serial "file:$WORK/output.log" \
    -serial "file:$WORK/status.log" \
    "${net[@]}" >"$WORK/qemu.log" 2>&1 &
  QPID=$!; T_QEMU=$(date +%s.%N)
  # stream the command's output (ttyS1) and, with -v, the console (ttyS0)
  tail -n +1 -s 0.2 -f --pid="$QPID" "$WORK/output.log" 2>/dev/null | stdbuf -oL tr -d '\r' &
  TPIDS+=($!)
  if [ "$VERBOSE" = 1 ]; then
    tail -n +1 -s 0.2 -f --pid="$QPID" "$WORK/console.log" 2>/dev/null | stdbuf -oL tr -d '\r' | sed -u 's/^/[vm] /' >&2 &
    TPIDS+=($!)
  fi
  t0=$(date +%s)
  VM_RC=0; TIMED_OUT=0; KVM_STUCK=0
  while kill -0 "$QPID" 2>/dev/null; do
    now=$(date +%s)
    if [ $booted = 0 ] && grep -q SOFTROCE_BOOTED "$WORK/status.log" 2>/dev/null; then
      booted=1; log "[$acc] guest init started after $((now - t0))s"
    fi
    check_rxe_up
    if [ "$acc" = kvm ] && [ "$ACCEL" = auto ] && [ $booted = 0 ] && [ $((now - t0)) -ge "$KVM_BOOT_S" ]; then
      KVM_STUCK=1; kill "$QPID" 2>/dev/null || true; break
    fi
    if [ $((now - T_RUN0_S)) -ge "$TIMEOUT" ]; then
      TIMED_OUT=1; log "timeout (${TIMEOUT}s) -- killing the VM"
      kill "$QPID" 2>/dev/null || true; break
    fi
    sleep 0.3
  done
  check_rxe_up
  wait "$QPID" 2>/dev/null || VM_RC=$?
  QPID=""
  sleep 0.3   # let tail flush
}

ACC=$(pick_accel)
log "kernel $KVER, accel $ACC, netdev $NETDEV, mem $MEM, smp $SMP"
run_vm "$ACC"
if [ "$KVM_STUCK" = 1 ]; then
  log "KVM guest did not reach init within ${KVM_BOOT_S}s; falling back to TCG (slower)"
  ACC=tcg
  run_vm tcg
fi

st_line() { tr -d '\r' < "$WORK/status.log" | grep -m1 "^$1" || true; }
RXE_UP=$(st_line SOFTROCE_RXE_UP); EXIT_LINE=$(st_line SOFTROCE_EXIT_STATUS=)
log "timings: total $(since "$T_RUN0")s wall;" \
    "guest uptime at rxe0 up: ${RXE_UP#SOFTROCE_RXE_UP }s;" \
    "at command end: $(echo "$EXIT_LINE" | awk '{print $2}')s"
if [ "$TIMED_OUT" = 1 ]; then
  tr -d '\r' < "$WORK/console.log" | tail -n 20 | sed 's/^/[vm] /' >&2
  exit 124
fi
if [ -z "$EXIT_LINE" ] || [ -z "$RXE_UP" ]; then
  log "VM failed before running the command (${EXIT_LINE:-no exit status}, qemu rc=$VM_RC); console tail:"
  tr -d '\r' < "$WORK/console.log" | tail -n 40 | sed 's/^/[vm] /' >&2
  tr -d '\r' < "$WORK/qemu.log" | tail -n 5 | sed 's/^/[qemu] /' >&2
  exit 125
fi
RC=${EXIT_LINE#SOFTROCE_EXIT_STATUS=}; RC=${RC%% *}
exit "$RC"
