// Package hostid names what "the same host" means to the backends that
// need one (shm, whose abstract socket and SO_PEERCRED checks work only
// within one kernel and its namespaces) and to a host agent, which tells
// its processes which host they are on (backend/agent routes only between
// different hosts).
//
// A host is one boot of one kernel (its boot id) seen from one network,
// pid and user namespace. An explicit name (node.Config.HostID, the
// CLI's --host-id) splits it further: processes that share a kernel but
// name different hosts act as separate hosts (a test rig with two agents
// in one VM, containers that must not share memory). A name never joins
// two kernels: it is mixed with the kernel's id, not put in its place.
package hostid

import (
	"crypto/sha256"
	"fmt"
	"os"
)

// Size is the size of a host id.
const Size = 32

// Of returns this process's host id: the kernel's boot id and the
// network, pid and user namespaces, and name when it is not "". It reads
// /proc (Linux); elsewhere it fails.
func Of(name string) ([Size]byte, error) {
	h := sha256.New()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return [Size]byte{}, fmt.Errorf("boot id: %w", err)
	}
	h.Write(boot)
	for _, ns := range []string{"net", "pid", "user"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return [Size]byte{}, fmt.Errorf("%s namespace: %w", ns, err)
		}
		h.Write([]byte{0})
		h.Write([]byte(l))
	}
	if name != "" {
		// A separator no namespace link contains, then the name: "" and
		// every name give different ids.
		h.Write([]byte("\x00\xffhost-id\x00"))
		h.Write([]byte(name))
	}
	var id [Size]byte
	copy(id[:], h.Sum(nil))
	return id, nil
}
