package shm

import "github.com/rdmamgr/rdmamgr/backend"

// Defaults of Config.
const (
	DefaultInlineMax   = 1 << 20
	DefaultMaxInFlight = 256
	DefaultMaxMapped   = 4096
)

// Config configures the shm backend. Zero fields take defaults.
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
	// InlineMax is the largest copy done inside Post, in the poster's
	// goroutine (DefaultInlineMax, 1 MiB: about 35 µs of copying here,
	// less than handing it to another goroutine and waking the poster
	// again costs across cores); larger ones run on the route's copier.
	InlineMax int
	// MaxInFlight bounds a route's operations posted and not reported
	// (DefaultMaxInFlight); Post waits for room past it.
	MaxInFlight int
	// MaxMapped bounds the remote regions a route keeps mapped
	// (DefaultMaxMapped); least recently used are unmapped first.
	MaxMapped int
}

func (c Config) withDefaults() Config {
	if c.InlineMax <= 0 {
		c.InlineMax = DefaultInlineMax
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxMapped <= 0 {
		c.MaxMapped = DefaultMaxMapped
	}
	return c
}
