package shm

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

var (
	// ErrNotSameHost: the peer runs on another host (or in another network
	// or pid namespace): the manager tries its next backend. It matches
	// rdmamgr.ErrNotSupported.
	ErrNotSameHost = fmt.Errorf("peer is not on this host: %w", rdmamgr.ErrNotSupported)
	// ErrNotShareable: the remote region is not memfd-backed and the route
	// has no fallback. It matches rdmamgr.ErrNotSupported.
	ErrNotShareable = fmt.Errorf("remote region is not in shared memory: %w", rdmamgr.ErrNotSupported)
	// ErrNotBuilt: this build has no shm backend (not Linux). It matches
	// rdmamgr.ErrNotSupported.
	ErrNotBuilt = fmt.Errorf("shm backend not built on this platform: %w", rdmamgr.ErrNotSupported)
)

var _ = errors.Is
