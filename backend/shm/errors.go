package shm

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

var (
	// ErrNotSameHost: the peer runs on another host (or in another network,
	// pid or user namespace), or as a user we do not serve: the manager
	// tries its next backend. It matches rdmamgr.ErrNotSupported.
	ErrNotSameHost = fmt.Errorf("peer is not on this host: %w", rdmamgr.ErrNotSupported)
	// ErrNotShareable: the remote region is not memfd-backed (caller memory
	// its owner registered in place) and the route has no fallback. It
	// matches rdmamgr.ErrNotSupported.
	ErrNotShareable = fmt.Errorf("remote region is not in shared memory: %w", rdmamgr.ErrNotSupported)
	// ErrNotBuilt: this build has no shm backend (not Linux). It matches
	// rdmamgr.ErrNotSupported.
	ErrNotBuilt = fmt.Errorf("shm backend not built on this platform: %w", rdmamgr.ErrNotSupported)
)

// Internal errors; they match the module's sentinels.
var (
	errBadPlace     = fmt.Errorf("shm: region lies outside its memfd: %w", rdmamgr.ErrProtocol)
	errForgedOrigin = fmt.Errorf("shm: origin claimed by a peer that is not this process's host agent: %w", rdmamgr.ErrUnauthenticated)
	errRouteClosed  = fmt.Errorf("shm: route closed: %w", rdmamgr.ErrClosed)
	errOwnerSilent  = fmt.Errorf("shm: owner did not answer a map request: %w", rdmamgr.ErrPeerGone)
	errOwnerGone    = fmt.Errorf("shm: owner closed the connection: %w", rdmamgr.ErrPeerGone)
	errCopyFault    = fmt.Errorf("shm: fault while copying shared memory: %w", rdmamgr.ErrPeerGone)
	// errSendAborted gives back the landing of a message its sender cut
	// short (msgSendAbort).
	errSendAborted = errors.New("shm: message cut short by its sender")
)

// uidRefused: the peer is on this host but runs as a uid we do not serve
// (Config.AllowUIDs). It matches ErrNotSameHost and rdmamgr.ErrNotSupported
// (the manager tries its next backend), and its text says what it is, so
// that a route's reason does not claim the peer is on another host.
type uidRefused struct{ uid uint32 }

func (e uidRefused) Error() string {
	return fmt.Sprintf("peer runs as uid %d, which this manager does not serve (serve --shm-allow-uid): %v", e.uid, rdmamgr.ErrNotSupported)
}

func (e uidRefused) Is(target error) bool { return target == ErrNotSameHost }
func (e uidRefused) Unwrap() error        { return rdmamgr.ErrNotSupported }
