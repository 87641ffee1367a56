//go:build ibverbs

package ibverbs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// Backend is the ibverbs data plane of one manager: one device port, one
// protection domain, one completion queue shared by every RC queue pair.
type Backend struct {
	cfg Config
	reg *memreg.Registry
	log *slog.Logger

	// life: control calls and region hooks hold it for reading while they
	// use verbs resources; Close holds it for writing while it frees them.
	life    sync.RWMutex
	closed  atomic.Bool
	started bool          // under life
	closeCh chan struct{} // closed when Close finished

	// Set by Start, read-only afterwards.
	dev      *devContext
	res      *verbsRes
	port     int
	ethernet bool
	mtu      int // active MTU (enum ibv_mtu)
	lid      uint16
	gidIndex int
	gid      [16]byte
	maxMsg   uint64
	rdAtom   int  // RDMA READs we accept in flight (max_dest_rd_atomic)
	initRd   int  // RDMA READs we may have in flight (max_rd_atomic cap)
	inflight int  // per-QP limit (MaxInFlight clamped to the device)
	atomics  bool // the device runs atomics and they are not disabled
	addr     atomic.Pointer[string]
	wake     eventFD
	cqBudget *wsem // work requests in flight on the CQ
	stop     chan struct{}

	mu      sync.Mutex // guards the fields below
	routes  map[*route]struct{}
	byQPN   map[uint32]*route
	pending map[*pendingRoute]struct{}
	nqp     int     // queue pairs alive (routes, accepted, pending)
	leaked  []*ring // rings of queue pairs destroyed before they drained

	mrMu  sync.Mutex
	mrs   map[uint64]*regData // region id -> its memory regions
	slabs map[uint64]*memReg  // slab id -> the slab's local memory region
	// dmabuf: device regions' dma-buf exports and verdicts (dmabuf.go);
	// guarded by mrMu.
	dmabuf dmabufState

	slots   slotTable
	batch   []done       // the poller's: completions of one poll
	coarse  atomic.Int64 // unix nanoseconds, never ahead: the poller's and the watchdog's last clock read
	ringSeq atomic.Uint32
	served  struct{ ops, bytesIn, rejected atomic.Uint64 }
	// invalidations counts proxies invalidated on routes that resolved
	// them, invalGiveUps the routes whose ack did not come in time
	// (via_inval.go).
	invalidations, invalGiveUps atomic.Uint64
	// invalHeld counts invalidates an initiator acked only after
	// operations on the proxy's rkey ended (tests).
	invalHeld atomic.Uint64
	inbox     atomic.Pointer[inboxRef] // SetInbox's
	// resolver: a host agent's (wiring.SetResolver, via.go).
	resolver atomic.Pointer[resolverRef]
	// ctx ends when Close begins: the resolves the backend serves.
	ctx       context.Context
	cancelCtx context.CancelFunc
	kick      chan struct{} // wakes the watchdog
	wg        sync.WaitGroup
	// workers: the agentServe routes' workers (via_serve.go), waited for
	// before Close takes life: they call the resolver, which registers
	// regions (RegisterRegion takes life).
	workers sync.WaitGroup
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ memreg.Hooks       = (*Backend)(nil)
	_ memreg.Revoker     = (*Backend)(nil)
	_ memreg.SlabHooks   = (*Backend)(nil)
	_ memreg.DeviceHooks = (*Backend)(nil)

	_ backend.InboxUser    = (*Backend)(nil)
	_ backend.Capabilities = (*Backend)(nil)
)

func init() { wiring.SetBackend(newIBVerbs) }

// newIBVerbs returns a backend for reg's regions. It does no I/O: Start
// opens the device. Package node reaches it through wiring.NewBackend.
func newIBVerbs(cfg Config, reg *memreg.Registry, log *slog.Logger) (backend.Backend, error) {
	if err := cfg.Verify(); err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errors.New("ibverbs: nil registry")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Backend{
		ctx:       ctx,
		cancelCtx: cancel,
		cfg:       cfg.withDefaults(),
		reg:       reg,
		log:       log.With("backend", "ibverbs"),
		closeCh:   make(chan struct{}),
		routes:    make(map[*route]struct{}),
		byQPN:     make(map[uint32]*route),
		pending:   make(map[*pendingRoute]struct{}),
		mrs:       make(map[uint64]*regData),
		slabs:     make(map[uint64]*memReg),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}, nil
}

// Kind returns backend.KindIBVerbs.
func (b *Backend) Kind() backend.Kind { return backend.KindIBVerbs }

// Addr returns "device:port gid" ("" before Start).
func (b *Backend) Addr() string {
	if p := b.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// Served counts the notices (PutWithImm) and Sends the backend served for
// peers: Ops, BytesIn (a Send's message copied into a receive buffer) and
// Rejected (refused by the inbox or the checks). RDMA READ, WRITE and the
// atomics are one-sided: the device serves them without the responder's
// CPU, so they are not counted.
func (b *Backend) Served() backend.ServedStats {
	return backend.ServedStats{Ops: b.served.ops.Load(), BytesIn: b.served.bytesIn.Load(), Rejected: b.served.rejected.Load()}
}

// Close closes every route (failing in-flight work with ErrClosed once the
// device no longer touches its memory), deregisters the remaining memory
// regions, frees the verbs resources and waits for the backend's
// goroutines. Idempotent.
func (b *Backend) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		<-b.closeCh
		return nil
	}
	defer close(b.closeCh)
	b.stopWorkers()
	b.life.Lock()
	defer b.life.Unlock()
	if !b.started {
		return nil
	}
	b.closeRoutes()
	close(b.stop)
	b.wake.fire()
	b.wg.Wait()
	err := b.freeVerbs()
	b.log.Info("device closed", "addr", b.Addr())
	return err
}

// closeRoutes aborts pending routes and fails every route with ErrClosed,
// and waits until each has drained (the device touches none of its memory).
func (b *Backend) closeRoutes() {
	b.mu.Lock()
	routes := make([]*route, 0, len(b.routes))
	for r := range b.routes {
		routes = append(routes, r)
	}
	pending := make([]*pendingRoute, 0, len(b.pending))
	for p := range b.pending {
		pending = append(pending, p)
	}
	b.mu.Unlock()
	for _, p := range pending {
		p.Abort()
	}
	closed := fmt.Errorf("ibverbs: backend closed: %w", rdmamgr.ErrClosed)
	for _, r := range routes {
		r.fail(closed)
	}
	for _, r := range routes {
		<-r.drained
	}
}

// freeVerbs deregisters the remaining memory regions and frees the verbs
// resources, once no goroutine uses them.
func (b *Backend) freeVerbs() error {
	var errs []error
	b.mrMu.Lock()
	for id, rd := range b.mrs {
		if err := rd.dereg(); err != nil {
			errs = append(errs, err)
		}
		delete(b.mrs, id)
	}
	for id, mr := range b.slabs { // after the regions: they used them
		if err := mr.dereg(); err != nil {
			errs = append(errs, err)
		}
		delete(b.slabs, id)
	}
	b.mrMu.Unlock()
	b.mu.Lock()
	for _, g := range b.leaked { // their queue pairs are gone, the poller too
		if err := g.release(); err != nil {
			errs = append(errs, err)
		}
	}
	b.leaked = nil
	b.mu.Unlock()
	if err := b.res.free(); err != nil {
		errs = append(errs, err)
	}
	b.dev.close()
	b.wake.close()
	return errors.Join(errs...)
}

// alive reports whether control calls may use the device; the caller
// holds life for reading.
func (b *Backend) alive() error {
	if b.closed.Load() {
		return rdmamgr.ErrClosed
	}
	if !b.started {
		return rdmamgr.ErrNotStarted
	}
	return nil
}

func (b *Backend) failAll(err error) {
	b.mu.Lock()
	routes := make([]*route, 0, len(b.routes))
	for r := range b.routes {
		routes = append(routes, r)
	}
	b.mu.Unlock()
	for _, r := range routes {
		r.fail(err)
	}
}

func (b *Backend) kickWatchdog() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}
