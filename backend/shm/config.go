package shm

import (
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/defaults"
)

// Config configures the shm backend. Zero (or negative) fields take
// DefaultConfig's values.
type Config struct {
	// Secret is the deployment's: every connection proves it (as the TCP
	// backend's data connections do).
	Secret backend.Secret
	// Fallback moves the bytes of remote regions that are not
	// memfd-backed (caller memory a peer registered in place): it is set
	// up alongside every shm route to the same peer, and shm routes post
	// such operations on it. Nil: such operations fail with
	// ErrNotShareable.
	Fallback backend.Backend
	// AllowUIDs are the user ids, besides our own, whose processes may
	// map the regions they hold keys for (SO_PEERCRED); each gets only
	// those regions' pages, with their access (package doc).
	AllowUIDs []int
	// HostID, when not "", names this host beyond its kernel: a peer
	// whose HostID differs is on another host though it shares our kernel
	// and namespaces (AcceptRoute refuses it with ErrNotSameHost, so its
	// manager tries its next backend). For test rigs and for processes
	// sharing a kernel that must act as separate hosts (node.Config.HostID,
	// --host-id). "" is the kernel's host (boot id and namespaces) alone.
	HostID string
	// InlineMax is the largest copy done inside Post, in the poster's
	// goroutine (1 MiB: about 35 µs of copying here,
	// less than handing it to another goroutine and waking the poster
	// again costs across cores); larger ones run on the route's copier.
	InlineMax int
	// MaxInFlight bounds a route's operations posted and not reported
	// (256); Post waits for room past it.
	MaxInFlight int
	// MaxMapped bounds the remote regions a route keeps mapped
	// (4096); least recently used are unmapped first.
	MaxMapped int
}

// DefaultConfig returns the values the zero fields of a Config take.
func DefaultConfig() Config {
	return Config{InlineMax: 1 << 20, MaxInFlight: 256, MaxMapped: 4096}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.InlineMax, c.MaxInFlight, c.MaxMapped = max(c.InlineMax, 0), max(c.MaxInFlight, 0), max(c.MaxMapped, 0)
	defaults.Set(&c.InlineMax, d.InlineMax)
	defaults.Set(&c.MaxInFlight, d.MaxInFlight)
	defaults.Set(&c.MaxMapped, d.MaxMapped)
	return c
}
