//go:build linux

package shm

import (
	"crypto/sha256"
	"fmt"
	"os"
)

// hostID names what "the same host" means for this backend: the same boot
// of the same kernel, in the same network namespace (the abstract socket
// is reachable only there), pid namespace (SO_PEERCRED's pid is checked)
// and user namespace (so are uids). Peers whose ids differ use another
// backend.
func hostID() ([hostIDSize]byte, error) {
	h := sha256.New()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return [hostIDSize]byte{}, fmt.Errorf("shm: boot id: %w", err)
	}
	h.Write(boot)
	for _, ns := range []string{"net", "pid", "user"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return [hostIDSize]byte{}, fmt.Errorf("shm: %s namespace: %w", ns, err)
		}
		h.Write([]byte{0})
		h.Write([]byte(l))
	}
	var id [hostIDSize]byte
	copy(id[:], h.Sum(nil))
	return id, nil
}
