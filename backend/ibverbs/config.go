package ibverbs

import (
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Config selects the RDMA device and port of the backend and tunes it.
// Zero fields take DefaultConfig's values.
type Config struct {
	// Device is the device name, e.g. "mlx5_0" or "rxe0"; empty picks the
	// first device with an active port.
	Device string
	// Port is the port number (1-based); 0 picks the first active port.
	Port int
	// GIDIndex is the GID table index used for addressing. -1 (the
	// default, see DefaultConfig) picks the first RoCE v2 GID holding an
	// IPv4-mapped address, else index 0. Because 0 is a valid index, a
	// zero Config means index 0; use DefaultConfig for auto selection.
	GIDIndex int
	// MaxInFlight bounds the work requests in flight per queue pair; Post
	// waits for room beyond it (back-pressure).
	MaxInFlight int
	// CQSize is the size of the completion queue shared by every queue
	// pair; it also bounds the work requests in flight on the backend as a
	// whole (clamped to the device's max_cqe).
	CQSize int
	// MaxMessage caps the bytes of one work request. Larger operations are
	// split into several work requests and complete as one. 0 means the
	// port's max_msg_sz.
	MaxMessage int
	// MaxRoutes bounds the queue pairs of the backend (routes it initiated,
	// routes it accepted and half-made ones).
	MaxRoutes int
	// WatchdogInterval is how often deadlines of in-flight work are checked.
	WatchdogInterval time.Duration
	// AckTimeout is the local ACK timeout exponent of the queue pairs
	// (4.096 µs × 2^AckTimeout, 1..31). With RetryCount it bounds how long
	// a dead peer takes to fail in-flight work with rdmamgr.ErrPeerGone.
	AckTimeout int
	// RetryCount is the number of transport retries (1..7; 0 takes the
	// default 6). Beware: rdma_rxe treats 7 as "retry forever", so a dead
	// peer would then only be found by the deadline watchdog.
	RetryCount int
	// DrainTimeout bounds the wait for flushed completions when a queue
	// pair is moved to the error state; after it the queue pair is
	// destroyed, which also stops the device from touching its memory.
	DrainTimeout time.Duration
	// KeepAlive is the idle time after which a queue pair probes its peer
	// with a zero-length RDMA WRITE, so that routes (and accepted queue
	// pairs) of dead peers are found and freed. Negative disables it.
	KeepAlive time.Duration
	// Spin is how long the completion poller keeps polling an empty queue
	// while work is in flight before it sleeps on the completion channel
	// (negative: never spin). test/softroce/latency-bench.sh measures it.
	Spin time.Duration
	// RecvSlots is the size of each queue pair's receive ring of control
	// messages (PutWithImm notices, Sends and their acks): a route carries
	// at most this many of them unanswered (fewer if the peer's ring is
	// smaller), a PutWithImm or Send beyond waits (back-pressure). Each
	// ring has 4 more slots (host agents' invalidates, acks and goodbye)
	// and takes RecvSlots+8 completion-queue entries, twice RecvSlots+4 on
	// the owner's side (its acks).
	RecvSlots int
	// MaxSend is the largest Send message the backend receives (bytes, up
	// to 1 MiB; 0 takes the default, 4096): each slot of an accepted queue pair's ring holds one, so
	// the ring costs RecvSlots × (MaxSend+16) bytes of registered memory
	// per route. A larger Send fails with rdmamgr.ErrLimit before anything
	// is posted.
	MaxSend int
	// DisableAtomics makes the backend refuse CompareAndSwap and FetchAdd
	// as a device without atomics does (Supports reports false and routes
	// do not offer them to peers).
	DisableAtomics bool
	// Fallback moves the bytes of a peer's device buffers that its owner
	// could not register with its NIC (no dma-buf: the handle has no RDMA
	// key): it is set up alongside every route to a peer that has one of
	// the same kind (the node's TCP backend, which stages device memory),
	// and routes post Puts and Gets on such buffers on it (fallback.go).
	// Nil: those are refused with ErrNoDmaBuf.
	Fallback backend.Backend
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		GIDIndex:         -1,
		MaxInFlight:      128,
		CQSize:           8192,
		MaxRoutes:        1024,
		WatchdogInterval: 20 * time.Millisecond,
		AckTimeout:       16, // 268 ms
		RetryCount:       6,  // 7 means "retry forever" on rxe (and in the IB spec for rnr_retry)
		DrainTimeout:     5 * time.Second,
		KeepAlive:        15 * time.Second,
		Spin:             200 * time.Microsecond, // test/softroce/latency-bench.sh
		RecvSlots:        16,
		MaxSend:          4096,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxInFlight == 0 {
		c.MaxInFlight = d.MaxInFlight
	}
	if c.CQSize == 0 {
		c.CQSize = d.CQSize
	}
	if c.MaxRoutes == 0 {
		c.MaxRoutes = d.MaxRoutes
	}
	if c.WatchdogInterval == 0 {
		c.WatchdogInterval = d.WatchdogInterval
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = d.AckTimeout
	}
	if c.RetryCount == 0 {
		c.RetryCount = d.RetryCount
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = d.KeepAlive
	}
	if c.RecvSlots == 0 {
		c.RecvSlots = d.RecvSlots
	}
	if c.MaxSend == 0 {
		c.MaxSend = d.MaxSend
	}
	return c
}

// Verify rejects nonsense up front.
func (c Config) Verify() error {
	c = c.withDefaults()
	switch {
	case c.Port < 0 || c.Port > 255:
		return fmt.Errorf("ibverbs: Port %d not in 0..255", c.Port)
	case c.GIDIndex < -1 || c.GIDIndex > 1<<16:
		return fmt.Errorf("ibverbs: GIDIndex %d not in -1..65536", c.GIDIndex)
	case c.MaxInFlight < 1 || c.MaxInFlight > 1<<16:
		return fmt.Errorf("ibverbs: MaxInFlight %d not in 1..65536", c.MaxInFlight)
	case c.CQSize < c.MaxInFlight || c.CQSize > 1<<22:
		return fmt.Errorf("ibverbs: CQSize %d not in MaxInFlight..4Mi", c.CQSize)
	case c.MaxMessage < 0:
		return fmt.Errorf("ibverbs: MaxMessage %d < 0", c.MaxMessage)
	case c.MaxRoutes < 1:
		return fmt.Errorf("ibverbs: MaxRoutes %d < 1", c.MaxRoutes)
	case c.WatchdogInterval < 0:
		return fmt.Errorf("ibverbs: WatchdogInterval %v < 0", c.WatchdogInterval)
	case c.AckTimeout < 1 || c.AckTimeout > 31:
		return fmt.Errorf("ibverbs: AckTimeout %d not in 1..31", c.AckTimeout)
	case c.RetryCount < 0 || c.RetryCount > 7:
		return fmt.Errorf("ibverbs: RetryCount %d not in 0..7", c.RetryCount)
	case c.DrainTimeout < 0:
		return fmt.Errorf("ibverbs: DrainTimeout %v < 0", c.DrainTimeout)
	case c.RecvSlots < 1 || c.RecvSlots > maxRecvSlots:
		return fmt.Errorf("ibverbs: RecvSlots %d not in 1..%d", c.RecvSlots, maxRecvSlots)
	case c.MaxSend < 0 || c.MaxSend > maxSendLimit:
		return fmt.Errorf("ibverbs: MaxSend %d not in 0..%d", c.MaxSend, maxSendLimit)
	}
	return nil
}

// DeviceInfo describes one RDMA device port.
type DeviceInfo struct {
	Name      string
	Port      int
	State     string // ibv_port_state_str: "active", "down", ...
	LinkLayer string // "Ethernet" (RoCE) or "InfiniBand"
	ActiveMTU int    // bytes
	LID       uint16
	// GIDs lists the port's non-zero GID table entries as
	// "<index> <address> <type>", e.g. "1 ::ffff:10.77.0.1 RoCE v2".
	GIDs []string
}
