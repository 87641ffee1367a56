//go:build ibverbs

package ibverbs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
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
	rdAtom   int // RDMA READs we accept in flight (max_dest_rd_atomic)
	initRd   int // RDMA READs we may have in flight (max_rd_atomic cap)
	inflight int // per-QP limit (MaxInFlight clamped to the device)
	addr     atomic.Pointer[string]
	wake     eventFD
	cqBudget *wsem // work requests in flight on the CQ
	stop     chan struct{}

	mu      sync.Mutex // guards the fields below
	routes  map[*route]struct{}
	byQPN   map[uint32]*route
	pending map[*pendingRoute]struct{}
	nqp     int // queue pairs alive (routes, accepted, pending)

	mrMu sync.Mutex
	mrs  map[uint64]*regData // region id -> its memory regions

	slots slotTable
	kick  chan struct{} // wakes the watchdog
	wg    sync.WaitGroup
}

// regData is what the backend keeps in Region.BackendData. A region has
// two memory regions over the same memory: local, with LOCAL_WRITE only,
// whose lkey the owner's own work uses; and remote, with exactly the access
// the region grants, whose rkey handles advertise. Revoking the region
// deregisters remote only, so peers lose access at once while the owner's
// work in flight goes on.
type regData struct {
	b      *Backend
	local  *memReg
	remote *memReg // nil once revoked; guarded by Backend.mrMu
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ memreg.Hooks    = (*Backend)(nil)
	_ memreg.Revoker  = (*Backend)(nil)
)

// New returns a backend for reg's regions. It does no I/O: Start opens the
// device.
func New(cfg Config, reg *memreg.Registry, log *slog.Logger) (backend.Backend, error) {
	if err := cfg.Verify(); err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errors.New("ibverbs: nil registry")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{
		cfg:     cfg.withDefaults(),
		reg:     reg,
		log:     log.With("backend", "ibverbs"),
		closeCh: make(chan struct{}),
		routes:  make(map[*route]struct{}),
		byQPN:   make(map[uint32]*route),
		pending: make(map[*pendingRoute]struct{}),
		mrs:     make(map[uint64]*regData),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
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

// Served returns zeros: RDMA READ and WRITE are one-sided, the device
// serves them without the responder's CPU, so nothing is counted.
func (b *Backend) Served() backend.ServedStats { return backend.ServedStats{} }

// Devices lists the RDMA device ports of the machine. With none it returns
// an empty list and ErrNoDevices (which wraps backend.ErrNotSupported).
func Devices() ([]DeviceInfo, error) {
	names, err := deviceNames()
	if err != nil {
		return []DeviceInfo{}, err
	}
	out := []DeviceInfo{}
	var errs []error
	for _, name := range names {
		d, err := openDevice(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		da, err := d.query()
		if err != nil {
			d.close()
			errs = append(errs, err)
			continue
		}
		for port := 1; port <= da.ports; port++ {
			pa, err := d.queryPort(port)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			info := DeviceInfo{Name: name, Port: port, State: portStateStr(pa.state), ActiveMTU: mtuBytes(pa.activeMTU), LID: pa.lid}
			if pa.linkLayer == linkLayerEthernet {
				info.LinkLayer = "Ethernet"
			} else {
				info.LinkLayer = "InfiniBand"
			}
			for _, g := range d.gids(port, pa.gidTblLen) {
				info.GIDs = append(info.GIDs, fmt.Sprintf("%d %s %s", g.index, gidString(g.gid), gidTypeStr(g.typ)))
			}
			out = append(out, info)
		}
		d.close()
	}
	if len(out) == 0 && len(errs) > 0 {
		return out, errors.Join(errs...)
	}
	return out, nil
}

// Start opens the device, allocates the protection domain and the
// completion queue, starts the completion poller, the async-event listener
// and the watchdog, and registers reg's regions (existing and future) with
// the device. Call it before regions are created: a region created while
// Start runs may be left without RDMA keys.
func (b *Backend) Start(ctx context.Context) error {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed.Load() {
		return backend.ErrClosed
	}
	if b.started {
		return errors.New("ibverbs: already started")
	}
	if err := b.open(); err != nil {
		return err
	}
	b.started = true
	b.wg.Add(3)
	go b.poller()
	go b.asyncLoop()
	go b.watchdog()
	b.log.Info("device open", "addr", b.Addr(), "mtu", mtuBytes(b.mtu), "max_msg", b.maxMsg,
		"cq", b.res.cqCapacity(), "max_in_flight", b.inflight)

	b.reg.AddHooks(b)
	var errs []error
	for _, r := range b.reg.Regions() {
		if err := b.registerLocked(r); err != nil {
			errs = append(errs, fmt.Errorf("region %d: %w", r.ID(), err))
		}
	}
	if len(errs) > 0 {
		b.log.Warn("existing regions not registered with the device", "err", errors.Join(errs...))
	}
	return nil
}

// open picks the device, port and GID and allocates the verbs resources.
func (b *Backend) open() error {
	names, err := deviceNames()
	if err != nil {
		return err
	}
	if b.cfg.Device != "" {
		if !slices.Contains(names, b.cfg.Device) {
			return fmt.Errorf("ibverbs: no device %q (have %v): %w", b.cfg.Device, names, backend.ErrNotSupported)
		}
		names = []string{b.cfg.Device}
	}
	var errs []error
	for _, name := range names {
		err := b.openDevice(name)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("ibverbs: no usable device port: %w: %w", errors.Join(errs...), backend.ErrNotSupported)
}

func (b *Backend) openDevice(name string) (err error) {
	d, err := openDevice(name)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	da, err := d.query()
	if err != nil {
		return err
	}
	var pa portAttr
	port := b.cfg.Port
	if port == 0 {
		for p := 1; p <= da.ports; p++ {
			a, err := d.queryPort(p)
			if err == nil && a.state == portActive {
				port, pa = p, a
				break
			}
		}
		if port == 0 {
			return fmt.Errorf("ibverbs: %s has no active port", name)
		}
	} else {
		if port > da.ports {
			return fmt.Errorf("ibverbs: %s has %d ports, not %d", name, da.ports, port)
		}
		if pa, err = d.queryPort(port); err != nil {
			return err
		}
		if pa.state != portActive {
			return fmt.Errorf("ibverbs: %s port %d is %s", name, port, portStateStr(pa.state))
		}
	}
	gidx, gid, err := pickGID(d, port, pa, b.cfg.GIDIndex)
	if err != nil {
		return err
	}
	if err := d.setAsyncNonblock(); err != nil {
		return err
	}
	cqSize := min(b.cfg.CQSize, da.maxCQE)
	res, err := d.allocRes(cqSize)
	if err != nil {
		return err
	}
	wake, err := newEventFD()
	if err != nil {
		res.free()
		return err
	}
	b.dev, b.res, b.wake, b.port = d, res, wake, port
	b.ethernet = pa.linkLayer == linkLayerEthernet
	b.mtu, b.lid, b.gidIndex, b.gid = pa.activeMTU, pa.lid, gidx, gid
	b.maxMsg = uint64(pa.maxMsg)
	if b.maxMsg == 0 || b.maxMsg > 1<<30 {
		b.maxMsg = 1 << 30
	}
	if b.cfg.MaxMessage > 0 && uint64(b.cfg.MaxMessage) < b.maxMsg {
		b.maxMsg = uint64(b.cfg.MaxMessage)
	}
	b.rdAtom = clamp(da.maxQPRdAtom, 1, 16)
	b.initRd = clamp(da.maxQPInitRdAtom, 1, 16)
	b.inflight = b.cfg.MaxInFlight
	if da.maxQPWR > 1 && b.inflight > da.maxQPWR-1 {
		b.inflight = da.maxQPWR - 1 // one more is kept for the keep-alive probe
	}
	b.cqBudget = newWsem(res.cqCapacity())
	addr := fmt.Sprintf("%s:%d %s", name, port, gidString(gid))
	b.addr.Store(&addr)
	return nil
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

// pickGID returns the GID at want, or with want -1 the first RoCE v2 GID
// holding an IPv4-mapped address, else index 0.
func pickGID(d *devContext, port int, pa portAttr, want int) (int, [16]byte, error) {
	if want >= 0 {
		if want >= pa.gidTblLen {
			return 0, [16]byte{}, fmt.Errorf("ibverbs: %s port %d has %d GIDs, not index %d", d.name, port, pa.gidTblLen, want)
		}
		e, err := d.queryGID(port, want)
		if err != nil {
			return 0, [16]byte{}, err
		}
		if e.gid == ([16]byte{}) && pa.linkLayer == linkLayerEthernet {
			return 0, [16]byte{}, fmt.Errorf("ibverbs: %s port %d GID index %d is empty", d.name, port, want)
		}
		return want, e.gid, nil
	}
	gids := d.gids(port, pa.gidTblLen)
	for _, e := range gids {
		if e.typ == gidTypeRoCEv2 && net.IP(e.gid[:]).To4() != nil {
			return e.index, e.gid, nil
		}
	}
	e, err := d.queryGID(port, 0)
	if err != nil {
		return 0, [16]byte{}, err
	}
	if e.gid == ([16]byte{}) && pa.linkLayer == linkLayerEthernet {
		return 0, [16]byte{}, fmt.Errorf("ibverbs: %s port %d has no GID", d.name, port)
	}
	return 0, e.gid, nil
}

// RegisterRegion registers r with the device: LOCAL_WRITE always,
// REMOTE_READ iff the region allows reads, REMOTE_WRITE iff it allows
// writes. It sets r.BackendData and r.RDMA.
func (b *Backend) RegisterRegion(r *memreg.Region) error {
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed.Load() || !b.started {
		return nil // no RDMA for regions made after Close: TCP still reaches them
	}
	return b.registerLocked(r)
}

func (b *Backend) registerLocked(r *memreg.Region) error {
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	if _, ok := b.mrs[r.ID()]; ok {
		return nil
	}
	if r.BackendData != nil {
		return fmt.Errorf("ibverbs: region %d already registered by another backend", r.ID())
	}
	mem := r.Mem()
	if len(mem) == 0 {
		return fmt.Errorf("ibverbs: empty region %d: %w", r.ID(), buffer.ErrInvalid)
	}
	access := accessLocalWrite
	if r.Access().Allows(buffer.AccessRead) {
		access |= accessRemoteRead
	}
	if r.Access().Allows(buffer.AccessWrite) {
		access |= accessRemoteWrite
	}
	local, err := b.res.regMR(addrOf(mem), uint64(len(mem)), accessLocalWrite)
	if err != nil {
		return err
	}
	remote, err := b.res.regMR(addrOf(mem), uint64(len(mem)), access)
	if err != nil {
		local.dereg()
		return err
	}
	rd := &regData{b: b, local: local, remote: remote}
	r.BackendData = rd
	r.RDMA = buffer.RDMAKey{Addr: remote.addr, RKey: remote.rkey}
	b.mrs[r.ID()] = rd
	return nil
}

// dereg deregisters both memory regions; the caller holds mrMu.
func (rd *regData) dereg() error {
	var errs []error
	if rd.remote != nil {
		errs = append(errs, rd.remote.dereg())
		rd.remote = nil
	}
	errs = append(errs, rd.local.dereg())
	return errors.Join(errs...)
}

// RevokeRegion cuts peers' access to r: its remote memory region is
// deregistered, so the rkey in every handle of r stops working (peers'
// work fails with a remote access error) before RevokeRegion returns. The
// owner's own use of r goes on through its local memory region.
func (b *Backend) RevokeRegion(r *memreg.Region) error {
	b.life.RLock()
	defer b.life.RUnlock()
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	rd := b.mrs[r.ID()]
	if rd == nil || rd.remote == nil {
		return nil
	}
	err := rd.remote.dereg()
	rd.remote = nil
	return err
}

// DeregisterRegion deregisters r's memory region. The registry calls it
// once no local work references the region; remote peers' work on it fails
// with a remote access error from then on.
func (b *Backend) DeregisterRegion(r *memreg.Region) error {
	b.life.RLock()
	defer b.life.RUnlock()
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	rd := b.mrs[r.ID()]
	if rd == nil {
		return nil
	}
	delete(b.mrs, r.ID())
	return rd.dereg()
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
	b.life.Lock()
	defer b.life.Unlock()
	if !b.started {
		return nil
	}
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
	closed := fmt.Errorf("ibverbs: backend closed: %w", backend.ErrClosed)
	for _, r := range routes {
		r.fail(closed)
	}
	for _, r := range routes {
		<-r.drained
	}
	close(b.stop)
	b.wake.fire()
	b.wg.Wait()

	var errs []error
	b.mrMu.Lock()
	for id, rd := range b.mrs {
		if err := rd.dereg(); err != nil {
			errs = append(errs, err)
		}
		delete(b.mrs, id)
	}
	b.mrMu.Unlock()
	if err := b.res.free(); err != nil {
		errs = append(errs, err)
	}
	b.dev.close()
	b.wake.close()
	b.log.Info("device closed", "addr", b.Addr())
	return errors.Join(errs...)
}

// alive reports whether control calls may use the device; the caller
// holds life for reading.
func (b *Backend) alive() error {
	if b.closed.Load() {
		return backend.ErrClosed
	}
	if !b.started {
		return ErrNotStarted
	}
	return nil
}

// newQP creates a queue pair in INIT, counting it against MaxRoutes.
func (b *Backend) newQP() (*queuePair, error) {
	b.mu.Lock()
	if b.nqp >= b.cfg.MaxRoutes {
		n := b.nqp
		b.mu.Unlock()
		return nil, fmt.Errorf("ibverbs: %d queue pairs: %w", n, backend.ErrLimit)
	}
	b.nqp++
	b.mu.Unlock()
	qp, err := b.res.createQP(b.inflight + 1)
	if err == nil {
		if err = qp.toInit(b.port); err != nil {
			qp.destroy()
		}
	}
	if err != nil {
		b.mu.Lock()
		b.nqp--
		b.mu.Unlock()
		return nil, err
	}
	return qp, nil
}

func (b *Backend) dropQP(qp *queuePair) {
	if err := qp.destroy(); err != nil {
		b.log.Warn("destroy queue pair", "err", err)
	}
	b.mu.Lock()
	b.nqp--
	b.mu.Unlock()
}

func randomPSN() (uint32, error) {
	var p [4]byte
	if _, err := rand.Read(p[:]); err != nil {
		return 0, fmt.Errorf("ibverbs: psn: %w", err)
	}
	return binary.BigEndian.Uint32(p[:]) & 0xFFFFFF, nil
}

func (b *Backend) localInfo(qp *queuePair, psn uint32) []byte {
	ri := routeInfo{mtu: uint8(b.mtu), rdAtom: uint8(b.rdAtom), qpn: qp.qpn, psn: psn, lid: b.lid, gid: b.gid}
	return ri.encode()
}

// connect moves qp from INIT to RTS towards the peer.
func (b *Backend) connect(qp *queuePair, psn uint32, peer routeInfo) error {
	if err := peer.checkAddress(b.ethernet); err != nil {
		return err
	}
	mtu := min(b.mtu, int(peer.mtu))
	if err := qp.toRTR(rtrAttr{port: b.port, mtu: mtu, sgidIndex: b.gidIndex, maxDestRd: b.rdAtom,
		global: b.ethernet, peer: peer}); err != nil {
		return err
	}
	return qp.toRTS(psn, b.cfg.AckTimeout, b.cfg.RetryCount, min(b.initRd, int(peer.rdAtom)))
}

// PrepareRoute creates an RC queue pair in INIT and returns its info.
func (b *Backend) PrepareRoute(ctx context.Context, peerID uint64) (backend.PendingRoute, []byte, error) {
	b.life.RLock()
	defer b.life.RUnlock()
	if err := b.alive(); err != nil {
		return nil, nil, err
	}
	psn, err := randomPSN()
	if err != nil {
		return nil, nil, err
	}
	qp, err := b.newQP()
	if err != nil {
		return nil, nil, err
	}
	p := &pendingRoute{b: b, peer: peerID, qp: qp, psn: psn}
	b.mu.Lock()
	b.pending[p] = struct{}{}
	b.mu.Unlock()
	return p, b.localInfo(qp, psn), nil
}

// AcceptRoute validates the initiator's info, creates our queue pair,
// moves it to RTS and returns its info. The accepted queue pair lives until
// it fails (a keep-alive probe finds the peer gone) or the backend closes.
func (b *Backend) AcceptRoute(ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
	peer, err := decodeRouteInfo(info)
	if err != nil {
		return nil, err
	}
	b.life.RLock()
	defer b.life.RUnlock()
	if err := b.alive(); err != nil {
		return nil, err
	}
	if err := peer.checkAddress(b.ethernet); err != nil {
		return nil, err
	}
	psn, err := randomPSN()
	if err != nil {
		return nil, err
	}
	qp, err := b.newQP()
	if err != nil {
		return nil, err
	}
	if err := b.connect(qp, psn, peer); err != nil {
		b.dropQP(qp)
		return nil, err
	}
	b.addRoute(newRoute(b, peerID, qp, true))
	return b.localInfo(qp, psn), nil
}

func (b *Backend) addRoute(r *route) {
	b.mu.Lock()
	b.routes[r] = struct{}{}
	b.byQPN[r.qp.qpn] = r
	b.mu.Unlock()
	b.kickWatchdog()
}

func (b *Backend) kickWatchdog() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// pendingRoute is the initiator's queue pair between PrepareRoute and
// Complete.
type pendingRoute struct {
	b    *Backend
	peer uint64
	psn  uint32

	mu sync.Mutex
	qp *queuePair // nil once completed or aborted
}

// Complete moves the queue pair RTR -> RTS towards the responder. On
// failure the queue pair is destroyed (Abort is then a no-op).
func (p *pendingRoute) Complete(ctx context.Context, peerInfo []byte) (backend.Route, error) {
	b := p.b
	b.life.RLock()
	defer b.life.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	qp := p.qp
	if qp == nil {
		return nil, fmt.Errorf("ibverbs: route already completed or aborted: %w", backend.ErrClosed)
	}
	if err := b.alive(); err != nil {
		return nil, err
	}
	p.qp = nil
	b.mu.Lock()
	delete(b.pending, p)
	b.mu.Unlock()
	peer, err := decodeRouteInfo(peerInfo)
	if err == nil {
		err = b.connect(qp, p.psn, peer)
	}
	if err != nil {
		b.dropQP(qp)
		return nil, err
	}
	r := newRoute(b, p.peer, qp, false)
	b.addRoute(r)
	return r, nil
}

// Abort destroys the queue pair. Idempotent.
func (p *pendingRoute) Abort() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.qp == nil {
		return
	}
	p.b.mu.Lock()
	delete(p.b.pending, p)
	p.b.mu.Unlock()
	p.b.dropQP(p.qp)
	p.qp = nil
}

// poller owns the completion queue: it polls in batches and sleeps on the
// completion channel when the queue is empty.
func (b *Backend) poller() {
	defer b.wg.Done()
	const batch = 64
	buf := newWCBuf(batch)
	for {
		n, err := b.res.poll(buf)
		if err != nil {
			b.log.Error("poll completion queue", "err", err)
			b.failAll(fmt.Errorf("ibverbs: completion queue failed: %w", backend.ErrClosed))
		}
		for i := range n {
			b.complete(buf.at(i))
		}
		if n == batch {
			continue
		}
		// With work in flight, poll a little longer before paying for a
		// completion event and a wake-up (perftest spins all the time).
		if n == 0 && b.cfg.Spin > 0 && b.slots.busy() {
			until := time.Now().Add(b.cfg.Spin)
			for n == 0 && time.Now().Before(until) {
				n, _ = b.res.poll(buf)
			}
			if n > 0 {
				for i := range n {
					b.complete(buf.at(i))
				}
				continue
			}
		}
		if err := b.res.arm(); err != nil {
			b.log.Error("arm completion queue", "err", err)
		}
		// Completions that arrived before the arm raise no event.
		if n, _ = b.res.poll(buf); n > 0 {
			for i := range n {
				b.complete(buf.at(i))
			}
			continue
		}
		ok, err := b.res.waitCQ(int(b.wake))
		if err != nil {
			b.log.Error("wait for completions", "err", err)
			select {
			case <-b.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if !ok {
			return // woken for shutdown; every route has drained
		}
	}
}

// complete dispatches one work completion.
func (b *Backend) complete(w wc) {
	c := b.slots.take(w.wrID)
	if c == nil {
		b.log.Debug("completion of an unknown work request", "wr_id", w.wrID, "qp", w.qpn, "status", wcStatusStr(w.status))
		return
	}
	c.r.completed(c, w.status, w.vendorErr)
}

// asyncLoop logs asynchronous events and fails the routes they concern.
func (b *Backend) asyncLoop() {
	defer b.wg.Done()
	for {
		ev, ok, err := b.dev.waitAsync(int(b.wake))
		if err != nil {
			b.log.Error("wait for async events", "err", err)
			select {
			case <-b.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if !ok {
			return
		}
		b.asyncEvent(ev)
	}
}

func (b *Backend) asyncEvent(ev asyncEvent) {
	name := eventTypeStr(ev.typ)
	switch ev.typ {
	case evQPFatal, evQPReqErr, evQPAccessErr, evPathMigErr:
		b.mu.Lock()
		r := b.byQPN[ev.qpn]
		b.mu.Unlock()
		b.log.Warn("queue pair error event", "event", name, "qp", ev.qpn, "known", r != nil)
		if r != nil {
			r.fail(fmt.Errorf("ibverbs: queue pair %d: async event %q: %w", ev.qpn, name, backend.ErrProtocol))
		}
	case evCQErr, evDeviceFatal:
		b.log.Error("fatal async event", "event", name)
		b.failAll(fmt.Errorf("ibverbs: async event %q: %w", name, backend.ErrClosed))
	case evPortErr:
		b.log.Warn("port error", "event", name, "port", ev.port)
	case evCommEst, evLastWQEReached:
		b.log.Debug("async event", "event", name, "qp", ev.qpn)
	default:
		b.log.Info("async event", "event", name, "qp", ev.qpn, "port", ev.port)
	}
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

// watchdog fails routes whose work missed its deadline and sends
// keep-alive probes on idle queue pairs. It sleeps while there is nothing
// to watch.
func (b *Backend) watchdog() {
	defer b.wg.Done()
	var routes []*route
	for {
		b.mu.Lock()
		routes = routes[:0]
		for r := range b.routes {
			routes = append(routes, r)
		}
		b.mu.Unlock()
		busy := false
		now := time.Now()
		for _, r := range routes {
			if r.inflight.Load() > 0 {
				busy = true
				r.expire(now)
			}
			if b.cfg.KeepAlive > 0 {
				r.keepAlive(now, b.cfg.KeepAlive)
			}
		}
		var wait <-chan time.Time
		switch {
		case busy:
			wait = time.After(b.cfg.WatchdogInterval)
		case len(routes) > 0 && b.cfg.KeepAlive > 0:
			wait = time.After(b.cfg.KeepAlive / 4)
		}
		select {
		case <-b.stop:
			return
		case <-b.kick:
		case <-wait:
		}
	}
}

// slotTable maps work-request ids to chunks: C never holds Go pointers.
// An id is the slot index in the low 32 bits and the slot's generation in
// the high 32, so a stale completion never matches a reused slot.
type slotTable struct {
	mu      sync.Mutex
	entries []slotEntry
	free    []uint32
}

type slotEntry struct {
	gen uint32
	c   *chunk
}

func (t *slotTable) alloc(c *chunk) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = uint32(len(t.entries))
		t.entries = append(t.entries, slotEntry{})
	}
	e := &t.entries[i]
	e.c = c
	return uint64(e.gen)<<32 | uint64(i)
}

// busy reports whether any work request is outstanding.
func (t *slotTable) busy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries) > len(t.free)
}

// take frees the slot of id and returns its chunk (nil if stale).
func (t *slotTable) take(id uint64) *chunk {
	i, gen := uint32(id), uint32(id>>32)
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(i) >= len(t.entries) {
		return nil
	}
	e := &t.entries[i]
	if e.c == nil || e.gen != gen {
		return nil
	}
	c := e.c
	e.c = nil
	e.gen++
	t.free = append(t.free, i)
	return c
}

// takeRoute frees every slot of r and returns their chunks.
func (t *slotTable) takeRoute(r *route) []*chunk {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*chunk
	for i := range t.entries {
		e := &t.entries[i]
		if e.c != nil && e.c.r == r {
			out = append(out, e.c)
			e.c = nil
			e.gen++
			t.free = append(t.free, uint32(i))
		}
	}
	return out
}
