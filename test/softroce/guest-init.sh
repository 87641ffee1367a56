#!/bin/busybox sh
# guest-init.sh -- PID 1 of the Soft-RoCE test VM (copied to /init of the
# initramfs by run-in-vm.sh; @KVER@ is substituted at build time).
#
# Serial ports: ttyS0 = console (kernel + this script's log),
#               ttyS1 = stdout/stderr of the user command,
#               ttyS2 = machine-readable status lines for the host script:
#                 SOFTROCE_BOOTED <uptime>
#                 SOFTROCE_RXE_UP <uptime>
#                 SOFTROCE_EXIT_STATUS=<rc> <uptime>
export PATH=/opt/app:/opt/app/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
/bin/busybox mkdir -p /proc /sys /dev /tmp /run
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev 2>/dev/null
/bin/busybox --install -s          # applet symlinks; never replaces real files
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run

# NOTE: Debian's busybox-static runs its own applets in preference to PATH
# (FEATURE_SH_STANDALONE), so in this busybox script a bare `ip` is busybox's
# limited ip (no `type veth`). Use iproute2's binary by full path.
IPR=/usr/sbin/ip
up() { read -r a _ < /proc/uptime; echo "$a"; }
log() { echo "[softroce-init $(up)s] $*"; }
status() { echo "$* $(up)" > /dev/ttyS2; }
finish() {  # $1 = exit status to report
  status "SOFTROCE_EXIT_STATUS=$1"
  sync
  poweroff -f
  sleep 5; echo o > /proc/sysrq-trigger   # should not be reached
}
fail() { log "FATAL: $*"; finish 125; }

# raw, no CR/LF translation on the data ports
stty -F /dev/ttyS1 raw -echo 2>/dev/null
stty -F /dev/ttyS2 raw -echo 2>/dev/null
status SOFTROCE_BOOTED
. /etc/softroce/run.conf

# --- kernel modules (ordered list generated from modules.dep at build time)
for ko in $(cat /etc/softroce/modules.list); do
  case "$ko" in
    */virtio*|*/failover.ko|*/net_failover.ko) [ "$SOFTROCE_NETDEV" = virtio ] || continue ;;
  esac
  case "$ko" in  # optional (needs PCLMULQDQ in the guest CPU)
    */crc32-pclmul.ko) insmod "$ko" 2>/dev/null; continue ;;
  esac
  args=""; case "$ko" in */dummy.ko) args="numdummies=0" ;; esac   # no implicit dummy0
  insmod "$ko" $args 2>/dev/null || grep -q "^$(basename "$ko" .ko) " /proc/modules || fail "insmod $ko"
done
log "modules loaded"

# --- network: a netdev with an IPv4 address for rxe
$IPR link set lo up
IP=10.77.0.1
case "$SOFTROCE_NETDEV" in
  dummy)  $IPR link add rxenet0 type dummy || fail "dummy"; ND=rxenet0 ;;
  veth)   $IPR link add veth0 type veth peer name veth1 || fail "veth"
          $IPR addr add 10.77.0.2/24 dev veth1; $IPR link set veth1 up; ND=veth0 ;;
  lo)     ND=lo; IP=127.0.0.1 ;;
  virtio) ND=""
          for i in $(seq 1 50); do
            for n in /sys/class/net/*; do
              n=${n##*/}; [ "$n" = lo ] && continue
              # a real (PCI) NIC has a device link; dummy/veth do not
              [ -e /sys/class/net/$n/device ] && [ "$(cat /sys/class/net/$n/type)" = 1 ] && ND=$n && break
            done
            [ -n "$ND" ] && break; sleep 0.1
          done
          [ -n "$ND" ] || fail "no virtio NIC found"
          IP=10.0.2.15 ;;   # qemu user-net default guest address
esac
[ -n "$SOFTROCE_MTU" ] && { $IPR link set "$ND" mtu "$SOFTROCE_MTU" || fail "mtu $SOFTROCE_MTU on $ND"; }
[ "$ND" = lo ] || $IPR addr add "$IP/24" dev "$ND"
$IPR link set "$ND" up || fail "link up $ND"
log "netdev $ND up with $IP"

# --- Soft-RoCE device
/usr/bin/rdma link add rxe0 type rxe netdev "$ND" || fail "rdma link add rxe0 type rxe netdev $ND"
P=/sys/class/infiniband/rxe0/ports/1
GIDX=""
for i in $(seq 1 200); do
  if grep -q ACTIVE $P/state 2>/dev/null; then
    for g in $P/gids/*; do
      case "$(cat "$g" 2>/dev/null)" in
        0000:0000:0000:0000:0000:ffff:*) GIDX=${g##*/}; break ;;
      esac
    done
    [ -n "$GIDX" ] && break
  fi
  sleep 0.1
done
[ -n "$GIDX" ] || { cat $P/state; ls $P/gids; fail "rxe0 not ACTIVE with an IPv4 GID"; }
log "rxe0 ACTIVE on $ND ($IP), IPv4 GID index $GIDX, $(cat $P/state)"
status SOFTROCE_RXE_UP

# --- the user's command
export RXE_DEV=rxe0 RXE_NETDEV=$ND RXE_IP=$IP RXE_GID_INDEX=$GIDX
[ -s /etc/softroce/env ] && . /etc/softroce/env   # SOFTROCE_ENV of the host
ulimit -l unlimited 2>/dev/null
cd /opt/app
log "running: $(cat /etc/softroce/cmd)"
# /bin/sh is dash (copied from the host), which does normal PATH lookup; the
# busybox applet links only fill in commands the image does not otherwise have.
/bin/sh -c "$(cat /etc/softroce/cmd)" < /dev/null > /dev/ttyS1 2>&1
rc=$?
log "command exited with $rc"
finish $rc
