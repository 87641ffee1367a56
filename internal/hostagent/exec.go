//go:build linux

package hostagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// op is one operation a process posted: read, queued for the poster,
// posted on a far route, completed (Complete), reported (done).
type op struct {
	p    *proc
	post agentwire.Post
	wr   backend.WorkRequest
	ref  memreg.Ref // the proxy of the process's local memory, while posted
	// cancelCh ends Post's wait for room (closed once, by cancel).
	cancelCh   chan struct{}
	cancelOnce sync.Once
	// refused: past maxOps, reported at once with this error.
	refused error

	mu    sync.Mutex    // guards route
	route backend.Route // set just before Post: cancel cancels it there
	// retried: posted again after a stale proxy (Complete), once.
	retried bool
}

// newOp registers the post, or returns an error: a wrid already in
// flight, or the process going.
func (p *proc) newOp(post *agentwire.Post) (*op, error) {
	o := &op{p: p, post: *post, cancelCh: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.opsDone != nil {
		return nil, p.endErr
	}
	if p.ops[post.WRID] != nil {
		return nil, fmt.Errorf("hostagent: pid %d posted wrid %d twice: %w", p.pid, post.WRID, rdmamgr.ErrProtocol)
	}
	if int64(len(p.ops)) >= maxOps.Load() {
		o.refused = fmt.Errorf("hostagent: pid %d has %d operations in flight: %w", p.pid, len(p.ops), rdmamgr.ErrLimit)
		return o, nil // not registered: refused at once
	}
	p.ops[post.WRID] = o
	return o, nil
}

// maxOps bounds a process's operations in flight at its agent (its far
// routes' back-pressure bounds them first, unless they fail fast); past
// it a post is refused with ErrLimit. (Atomic: tests change it.)
var maxOps atomic.Int64

func init() { maxOps.Store(1 << 16) }

// cancel ends the operation early with cause (the first cause wins): at
// once if it is not posted yet (the poster sees it), through its route's
// Cancel if it is.
func (o *op) cancel(cause error) {
	o.wr.RequestCancel(cause)
	o.cancelOnce.Do(func() { close(o.cancelCh) })
	o.mu.Lock()
	r := o.route
	o.mu.Unlock()
	if r != nil {
		r.Cancel(&o.wr)
	}
}

// cancel cancels the operation wrid, if it is in flight (a late cancel,
// of an operation already reported, is ignored).
func (p *proc) cancel(wrid uint64, cause error) {
	p.mu.Lock()
	o := p.ops[wrid]
	p.mu.Unlock()
	if o != nil {
		o.cancel(cause)
	}
}

// poster posts the process's operations in the order they came.
func (p *proc) poster() {
	defer p.loops.Done()
	for {
		select {
		case o := <-p.posts:
			o.start()
			p.queued.Add(-1)
		case <-p.dead:
			p.drainPosts(p.endErr)
			return
		}
	}
}

// drainPosts fails the operations queued and not posted.
func (p *proc) drainPosts(err error) {
	for {
		select {
		case o := <-p.posts:
			o.finish(err)
			p.queued.Add(-1)
		default:
			return
		}
	}
}

// start maps the local memory, takes the far route and posts. A failure
// before Post reports the operation at once.
func (o *op) start() {
	if fr, _ := o.prepare(true); fr != nil {
		o.postOn(fr)
	}
}

// prepareFast is prepare when the local region's proxy and the far route
// are there already: it reports false, having done nothing, when it would
// have to wait for a mapping or a route setup.
func (o *op) prepareFast() (backend.Route, bool) { return o.prepare(false) }

// postOn posts the prepared operation on its far route fr.
func (o *op) postOn(fr backend.Route) {
	if err := fr.Post(&o.wr); err != nil {
		o.finish(o.causeOr(err))
		return
	}
	o.posted(fr)
}

// posted passes on a cancel that may have come while the operation was
// being posted: it may have reached the route before Post did (ignored
// there): cancel is RequestCancel, then a look at o.route, so either it
// saw the route after Post or the cause is seen here.
func (o *op) posted(fr backend.Route) {
	if o.wr.CancelCause() != nil {
		fr.Cancel(&o.wr)
	}
}

// postList posts prepared operations, in order, on their far route fr:
// in one chain (one write on the connection) when fr takes chains.
func postList(fr backend.Route, ops []*op, wrs []*backend.WorkRequest) []*backend.WorkRequest {
	lp, ok := fr.(backend.ListPoster)
	if !ok || len(ops) == 1 {
		for _, o := range ops {
			o.postOn(fr)
		}
		return wrs
	}
	wrs = wrs[:0]
	for _, o := range ops {
		wrs = append(wrs, &o.wr)
	}
	for i := 0; i < len(wrs); {
		n, err := lp.PostList(wrs[i:])
		for _, o := range ops[i : i+n] {
			o.posted(fr)
		}
		i += n
		if i < len(wrs) { // wrs[i] was not posted: err says why
			ops[i].finish(ops[i].causeOr(err))
			i++
		}
	}
	clear(wrs)
	return wrs
}

// local is the proxy the operation's local memory is: the agent reads the
// process's memory (Put, PutWithImm, Send) or writes it (Get).
func (o *op) need() buffer.Access {
	if o.post.Op == backend.OpRead {
		return buffer.AccessWrite
	}
	return buffer.AccessRead
}

// prepare maps the local memory and takes the far route; it returns the
// route to post on, or nil when the operation was reported already (a
// failure, a cancel). With slow false it stops (nil, false) before
// anything that waits.
func (o *op) prepare(slow bool) (backend.Route, bool) {
	p, post := o.p, &o.post
	var h buffer.Buffer
	var fr backend.Route
	var farID uint64
	var err error
	if !post.Op.Atomic() {
		h, err = p.cachedProxy(post.Local.Region, post.Local.Key, o.need())
	}
	if err == nil {
		fr, farID = p.a.cachedFar(post.FarAgent, o.pin())
	}
	if !slow && (err != nil || fr == nil || (h.Region == 0 && !post.Op.Atomic())) {
		return nil, false
	}
	if err := o.wr.CancelCause(); err != nil {
		o.finish(err)
		return nil, true
	}
	select {
	case <-p.dead:
		o.finish(p.endErr)
		return nil, true
	default:
	}
	if err != nil {
		o.finish(err)
		return nil, true
	}
	if (h.Region == 0 && !post.Op.Atomic()) || fr == nil {
		// The first mapping of a region and the far route's setup are
		// bounded (and end with the process); a cancel is seen once
		// they end.
		ctx, cancel := context.WithTimeout(p.ctx, mapTimeout)
		defer cancel()
		if h.Region == 0 && !post.Op.Atomic() {
			if h, err = p.proxyOf(ctx, post.Local.Region, post.Local.Key, o.need()); err != nil {
				o.finish(o.causeOr(err))
				return nil, true
			}
		}
		if fr == nil {
			if err = p.farBudget(); err == nil {
				if fr, farID, err = p.a.farRoute(ctx, post.FarAgent, o.pin()); err != nil && !errors.Is(err, rdmamgr.ErrClosed) {
					p.farFailed()
				}
			}
			if err != nil {
				o.finish(o.causeOr(err))
				return nil, true
			}
		}
	}
	if farID != post.FarAgentID {
		// Via is a slot of the agent the process's route was set up
		// with; the one at that address now is another (it restarted):
		// the slot may be another process's. PEER_GONE ends the
		// process's route; the next one asks the target afresh.
		o.finish(fmt.Errorf("hostagent: post %d names slot %d of agent %016x at %s, which is agent %016x now: %w",
			post.WRID, post.Via, post.FarAgentID, post.FarAgent, farID, rdmamgr.ErrPeerGone))
		return nil, true
	}
	wr := &o.wr
	if !post.Op.Atomic() {
		if h, err = h.Slice(post.Local.Offset, post.Local.Length); err != nil {
			o.finish(err)
			return nil, true
		}
		if o.ref, err = p.a.reg.AcquireLocal(h); err != nil {
			o.finish(err)
			return nil, true
		}
		// The region too: an RDMA route takes its local key from it.
		wr.Local, wr.LocalRegion = o.ref.Bytes(), o.ref.Region()
	}
	wr.Op, wr.Remote, wr.Via, wr.Origin = post.Op, post.Remote, post.Via, p.id
	wr.Imm, wr.HasImm, wr.Compare, wr.Swap = post.Imm, post.HasImm, post.Compare, post.Swap
	if post.Deadline > 0 {
		wr.Deadline = time.Now().Add(post.Deadline)
	}
	wr.Done, wr.Cancel = o, o.cancelCh
	o.mu.Lock()
	o.route = fr
	o.mu.Unlock()
	return fr, true
}

// pin is the operation's pin (pinOf): the route to its far agent it
// takes among several (ibverbs), the one every operation from its
// process to its far process takes.
func (o *op) pin() uint32 { return pinOf(o.p.slot, o.post.Via) }

// causeOr returns the cancel cause if one was set (an error that came
// from the cancel's interruption), else err.
func (o *op) causeOr(err error) error {
	if c := o.wr.CancelCause(); c != nil {
		return c
	}
	return err
}

// Complete implements backend.Completer: the far route reported wr. One
// that met a stale proxy at the far agent (agentapi.ErrStaleProxy: on
// ibverbs the region was revoked or released there since the route cached
// its rkey, and the route failed with it) is posted once more, on a fresh
// route, for the far agent's own answer (revoked, released, peer gone,
// or done on a region mapped again).
func (o *op) Complete(wr *backend.WorkRequest, err error) {
	if errors.Is(err, agentapi.ErrStaleProxy) && !o.retried && wr.CancelCause() == nil {
		o.retried = true
		if o.p.a.spawn(o.retry) {
			return
		}
	}
	o.finish(err)
}

// retry posts the operation again on the route to its far agent, set up
// afresh when the old one failed (bounded as the first setup).
func (o *op) retry() {
	p := o.p
	ctx, cancel := context.WithTimeout(p.ctx, mapTimeout)
	defer cancel()
	fr, farID, err := p.a.farRoute(ctx, o.post.FarAgent, o.pin())
	if err == nil && farID != o.post.FarAgentID {
		err = fmt.Errorf("hostagent: post %d names agent %016x at %s, which is agent %016x now: %w",
			o.post.WRID, o.post.FarAgentID, o.post.FarAgent, farID, rdmamgr.ErrPeerGone)
	}
	if err == nil {
		err = o.wr.CancelCause()
	}
	if err != nil {
		o.finish(o.causeOr(err))
		return
	}
	o.wr.Result = 0
	o.mu.Lock()
	o.route = fr
	o.mu.Unlock()
	o.postOn(fr)
}

// finish reports the operation to the process, once: its local
// reference goes first (the backend no longer touches the memory).
func (o *op) finish(err error) {
	o.ref.Release()
	p := o.p
	d := agentwire.Done{WRID: o.post.WRID, Code: uint32(backend.Code(err))}
	if err == nil && o.post.Op.Atomic() {
		d.Result = o.wr.Result
	}
	p.mu.Lock()
	if p.ops[o.post.WRID] == o {
		delete(p.ops, o.post.WRID)
	}
	p.out = append(p.out, d) // before opsDone: the writer's last flush sends it
	if p.opsDone != nil && len(p.ops) == 0 {
		select {
		case <-p.opsDone:
		default:
			close(p.opsDone)
		}
	}
	p.sendLocked()
	p.mu.Unlock()
}

// mapTimeout bounds what a post waits for before it is on the route: the
// first mapping of its local region and the setup of the far route.
const mapTimeout = 10 * time.Second
