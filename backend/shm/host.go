//go:build linux

package shm

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr/internal/hostid"
)

// hostID names what "the same host" means for this backend: the same boot
// of the same kernel, in the same network namespace (the abstract socket
// is reachable only there), pid namespace (SO_PEERCRED's pid is checked)
// and user namespace (so are uids), and the same Config.HostID. Peers
// whose ids differ use another backend.
func hostID(name string) ([hostIDSize]byte, error) {
	id, err := hostid.Of(name)
	if err != nil {
		return id, fmt.Errorf("shm: %w", err)
	}
	return id, nil
}
