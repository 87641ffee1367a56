//go:build ibverbs

package ibverbs

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Host agents (see the package doc, "Host agents"): the initiator's side
// of operations with a Via (the far agent's proxy resolved over the
// route and cached), and the resolver a host agent's backend serves them
// with.

var _ agentapi.FarAgent = (*route)(nil)

// FarIsAgent implements agentapi.FarAgent: the peer's route info carries
// infoAgent (the initiator's route: what the responder's answer said), so
// a host agent drops a far route to a manager that is not one.
func (r *route) FarIsAgent() bool { return r.peerAgent }

// resolverRef boxes the resolver for an atomic pointer.
type resolverRef struct{ r agentapi.Resolver }

func init() { wiring.AddResolverSetter(setResolver) }

// setResolver is this package's part of wiring.SetResolver: it gives b (a
// *Backend) r. Routes set up afterwards say so in their info (infoAgent).
func setResolver(bb backend.Backend, r agentapi.Resolver) bool {
	b, ok := bb.(*Backend)
	if !ok || b == nil {
		return false
	}
	if r == nil {
		b.resolver.Store(nil)
	} else {
		b.resolver.Store(&resolverRef{r: r})
	}
	return true
}

const (
	// maxViaCache bounds the resolutions an initiator's route keeps; one
	// more drops an arbitrary one.
	maxViaCache = 256
	// resolveWait bounds the initiator's wait for an answer: the far
	// agent's Resolve ends within agentapi.ResolveTimeout.
	resolveWait = agentapi.ResolveTimeout + 2*time.Second
)

// viaKey names what a process's handle names at the far agent.
type viaKey struct {
	via    uint16
	region uint64
	key    buffer.Key
}

// viaRes is a resolution: the far agent's proxy of the process's region,
// its remote memory region (addr, rkey, access, length) and its id and
// key in the far agent's registry (a notice names them).
type viaRes struct {
	addr     uint64
	rkey     uint32
	access   buffer.Access
	length   uint64
	proxy    uint64
	proxyKey buffer.Key
}

// pendingResolve is a resolve sent and not yet answered.
type pendingResolve struct {
	k    viaKey
	done chan struct{} // closed with the answer
	e    *viaEntry     // the resolution (code OK)
	code rdmapb.Code
}

var (
	errViaNotAgent    = fmt.Errorf("ibverbs: an operation for an attached process (via) on a route whose peer is not a host agent: %w", rdmamgr.ErrNotSupported)
	errOriginNoVia    = fmt.Errorf("ibverbs: an origin on an operation for the peer itself (no via): %w", rdmamgr.ErrNotSupported)
	errServeNotAgent  = fmt.Errorf("ibverbs: a message for an attached process (via) to a backend that is not a host agent: %w", rdmamgr.ErrNotSupported)
	errOriginPeer     = fmt.Errorf("ibverbs: an origin from a peer that is not a host agent: %w", rdmamgr.ErrNotSupported)
	errNoticeNotProxy = fmt.Errorf("ibverbs: a notice for an attached process names no proxy resolved for one: %w", rdmamgr.ErrBadKey)
)

// viaTarget returns the resolution of the far agent's proxy that wr
// names (wr.Via != 0), held for wr's operation (r.viaRelease gives it
// back; the operation's end does once it has one: op.ve), and the remote
// address of its n bytes, resolving them over the route when the route
// has no resolution that admits need. Resolving waits for the far
// agent's answer: without wait it fails with errWouldWait.
func (r *route) viaTarget(wr *backend.WorkRequest, need buffer.Access, n uint64, wait bool) (*viaEntry, uint64, error) {
	if !r.peerAgent {
		return nil, 0, errViaNotAgent
	}
	k := viaKey{via: wr.Via, region: wr.Remote.Region, key: wr.Remote.Key}
	r.viaMu.Lock()
	e := r.viaCache[k]
	if e != nil && e.res.access.Allows(need) {
		e.users++ // cached entries are live
	} else {
		e = nil
	}
	r.viaMu.Unlock()
	if e == nil {
		if !wait {
			return nil, 0, errWouldWait
		}
		var err error
		if e, err = r.resolve(wr, k, need); err != nil {
			return nil, 0, err
		}
		if !e.res.access.Allows(need) {
			r.viaRelease(e)
			return nil, 0, fmt.Errorf("ibverbs: %s via %d: the far agent's proxy of region %d admits %s: %w",
				wr.Op, wr.Via, k.region, e.res.access, rdmamgr.ErrAccess)
		}
	}
	off := wr.Remote.Offset
	if off > e.res.length || n > e.res.length-off {
		r.viaRelease(e)
		return nil, 0, fmt.Errorf("ibverbs: %s via %d of [%d,+%d) in a region of %d bytes: %w",
			wr.Op, wr.Via, off, n, e.res.length, rdmamgr.ErrOutOfRange)
	}
	return e, e.res.addr + off, nil
}

// resolve asks the far agent for the proxy of k (a control message that
// takes a credit, a cell and room in flight, as a Send's) and waits for
// its answer: until wr's deadline, its cancel, the route's end or
// resolveWait. The answer is cached (also when the wait gave up first).
func (r *route) resolve(wr *backend.WorkRequest, k viaKey, need buffer.Access) (*viaEntry, error) {
	if err := r.reserve(1, true, wr, true); err != nil {
		return nil, err
	}
	cell := r.takeCell()
	pr := &pendingResolve{k: k, done: make(chan struct{})}
	c := &chunk{r: r, cell: cell + 1, res: pr}
	m := ctlMsg{kind: ctlResolve, region: k.region, key: k.key, slot: k.via, access: need}
	r.postMu.Lock()
	if r.failing {
		r.postMu.Unlock()
		r.ring.freeCell(cell)
		r.unreserve(1, true)
		return nil, r.Err()
	}
	m.seq = r.seq
	r.seq++
	size := m.put(r.ring.cell(cell))
	r.viaMu.Lock()
	r.resolving[m.seq] = pr
	r.viaMu.Unlock()
	id := r.b.slots.alloc(c)
	r.outstanding.Add(1)
	batch := make(wrBuf, 0, 1)
	batch.addSend(id, r.ring.cellAddr(cell), uint32(size), r.ring.mr.lkey, 0, 0, 0)
	_, perr := r.qp.post(batch)
	r.postMu.Unlock()
	if perr != nil {
		r.b.slots.take(id)
		r.ring.freeCell(cell)
		r.unreserve(1, true)
		r.viaMu.Lock()
		delete(r.resolving, m.seq)
		r.viaMu.Unlock()
		r.wrDone(1)
		err := fmt.Errorf("ibverbs: resolve: %w: %w", perr, rdmamgr.ErrClosed)
		r.fail(err)
		return nil, err
	}
	return r.awaitResolve(wr, pr)
}

// awaitResolve waits for the answer to pr and holds its resolution.
func (r *route) awaitResolve(wr *backend.WorkRequest, pr *pendingResolve) (*viaEntry, error) {
	limit := time.Now().Add(resolveWait)
	if !wr.Deadline.IsZero() && wr.Deadline.Before(limit) {
		limit = wr.Deadline
	}
	t := time.NewTimer(time.Until(limit))
	defer t.Stop()
	select {
	case <-pr.done:
	case <-r.Done():
		return nil, r.Err()
	case <-wr.Cancel:
		return nil, fmt.Errorf("ibverbs: waiting for the far agent's proxy: %w", context.Canceled)
	case <-t.C:
		return nil, fmt.Errorf("ibverbs: waiting for the far agent's proxy of region %d via %d: %w", pr.k.region, pr.k.via, rdmamgr.ErrDeadline)
	}
	if pr.code != rdmapb.Code_OK {
		return nil, fmt.Errorf("ibverbs: %s via %d: the far agent: %w", wr.Op, pr.k.via, &backend.RemoteError{Code: pr.code, Op: wr.Op})
	}
	r.viaMu.Lock()
	err := r.holdLocked(pr.e) // the answer may have been invalidated since
	r.viaMu.Unlock()
	if err != nil {
		return nil, err
	}
	return pr.e, nil
}

// answered handles the far agent's answer m to a resolve: it wakes the
// poster and caches a resolution. The caller holds postMu (the poller).
func (r *route) answered(m ctlMsg) error {
	r.viaMu.Lock()
	defer r.viaMu.Unlock()
	pr := r.resolving[m.seq]
	if pr == nil {
		return fmt.Errorf("ibverbs: answer %d to no resolve: %w", m.seq, rdmamgr.ErrProtocol)
	}
	delete(r.resolving, m.seq)
	pr.code = rdmapb.Code(m.imm)
	if old := r.viaCache[pr.k]; old != nil {
		r.uncacheLocked(old)
	}
	if pr.code == rdmapb.Code_OK {
		res := viaRes{addr: m.addr, rkey: m.rkey, access: m.access, length: m.length, proxy: m.region, proxyKey: m.key}
		if len(r.viaCache) >= maxViaCache {
			for _, e := range r.viaCache {
				r.uncacheLocked(e) // its holders keep it (viaLive)
				break
			}
		}
		pr.e = &viaEntry{k: pr.k, res: res, cached: true}
		r.viaCache[pr.k] = pr.e
		r.viaLive[pr.e] = struct{}{}
	}
	close(pr.done)
	r.credits.release(1) // the owner reposted its slot when it took the resolve
	return nil
}

// forget drops the route's resolution of k (its rkey failed).
func (r *route) forget(k viaKey) {
	r.viaMu.Lock()
	if e := r.viaCache[k]; e != nil {
		r.uncacheLocked(e)
	}
	r.viaMu.Unlock()
}

// staleProxy is the error of an operation with a Via whose rkey the far
// device refused: the far agent's proxy is gone (agentapi.ErrStaleProxy).
func (r *route) staleProxy(wr *backend.WorkRequest, e error) error {
	r.forget(viaKey{via: wr.Via, region: wr.Remote.Region, key: wr.Remote.Key})
	return fmt.Errorf("ibverbs: %s via %d on region %d: %w: %w", wr.Op, wr.Via, wr.Remote.Region, agentapi.ErrStaleProxy, e)
}

// checkOrigin refuses an origin without a via (as TCP does).
func checkOrigin(wr *backend.WorkRequest) error {
	if wr.Origin != 0 && wr.Via == 0 {
		return errOriginNoVia
	}
	return nil
}
