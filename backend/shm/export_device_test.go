//go:build linux

package shm

import "github.com/rdmamgr/rdmamgr/backend"

// RoutePaths returns how many peer device regions route rt opened through
// CUDA IPC and how many operations its fallback route counted.
func RoutePaths(rt backend.Route) (ipcOpens, fallbackOps uint64) {
	r := rt.(*route)
	if r.fb != nil {
		fallbackOps = r.fb.Stats().Ops
	}
	return r.ipcOpens.Load(), fallbackOps
}
