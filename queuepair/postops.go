package queuepair

import (
	"context"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// PostOps posts a chain: wrs[i] carries ops[i] (any verb), in order, at
// the cost of one post (one lock and one wake-up of the route's sender
// when the route posts chains, backend.ListPoster; a loop of posts
// otherwise). The work requests are caller-owned and reusable as with
// PostPut; each completes on its own, exactly as if posted alone: an
// operation refused before posting (a check, a full completion queue, ctx
// already ended) completes at once with its error and the others are
// posted. ctx bounds the post as for Put (doc.go, "Posting"); whether it
// had ended is read once, as the chain begins. It panics
// if len(wrs) != len(ops) or a work request is pending (or appears twice),
// having posted the ones before it.
func (q *QueuePair) PostOps(ctx context.Context, wrs []*WorkRequest, ops []Op) {
	if len(wrs) != len(ops) {
		panic("queuepair: PostOps with len(wrs) != len(ops)")
	}
	q.postOps(ctx, wrs, ops, nil, nil)
}

// postOps is PostOps; p and pre, when not nil, are what PrepareOps
// checked of ops (pre[i] is ops[i], compact): inline runs arm them with
// armChecked.
func (q *QueuePair) postOps(ctx context.Context, wrs []*WorkRequest, ops []Op, p *prepared, pre []preOp) {
	c := postCtx(ctx)
	if q.list == nil || len(wrs) == 1 {
		var dl time.Time
		for i := range ops {
			o := &ops[i]
			if (o.Op == backend.OpWrite || o.Op == backend.OpRead) && o.Imm == 0 && !o.HasImm && o.Compare == 0 && o.Swap == 0 &&
				q.armOne(wrs[i], o.Op, &o.Local, &o.Remote, c, o.ID, o.Unsignaled) {
				continue
			}
			if dl.IsZero() {
				dl = q.deadline()
			}
			q.arm(wrs[i], o.Op, &o.Local, &o.Remote, dl, c, o.operands())
		}
		return
	}
	dl := q.deadline()
	chain := chains.Get().(*[]*backend.WorkRequest)
	ready := (*chain)[:0]
	n := int64(len(ops))
	ch := chainPrep{cq: q.cq.Load()}
	if ch.cq != nil {
		ch.slots = ch.cq.reserveN(n)
		if !q.slow && ch.slots > 0 { // one atomic operation for the chain's fast slots
			ch.fast = ch.slots
			ch.cq.fast.Add(ch.fast)
		}
	}
	if q.ops.EnterN(n) {
		ch.entries = n
	}
	if q.reg != nil {
		ch.local = q.reg.NewLocalRun(q.near.Load())
	}
	var opd operands
	// The common case of a chain's operation is armed by armFast, with
	// no call of prepare and reset: no observer, a registry, and a ctx
	// that had not ended when the chain began (checked once for the
	// chain: one that ends while it is armed bounds the posts that wait
	// for room, through their Cancel channel, as prepare's do).
	fastOK := q.obs == nil && q.reg != nil && (c == nil || c.Err() == nil)
	var cancel <-chan struct{}
	if c != nil {
		cancel = c.Done()
	}
	i := 0
	defer func() {
		if i < len(ops) { // a prepare panicked (a pending request): post the ones before it, as a loop of posts would have
			ch.giveBack(q)
			q.postList(ready, c)
		}
	}()
	for ; i < len(ops); i++ {
		o := &ops[i]
		w := wrs[i]
		ch.left = n - int64(i)
		if fastOK && q.inl != nil && ch.cq != nil {
			var pi []preOp
			if pre != nil {
				pi = pre[i:]
			}
			if k := q.runInline(wrs[i:], ops[i:], p, pi, &ch, &ready, c, dl, cancel); k > 0 {
				i += k - 1
				continue
			}
		}
		if fastOK {
			if took, ok := q.armFast(w, o, dl, cancel, &ch); took {
				if ok {
					ready = append(ready, &w.wr)
				}
				continue
			}
		}
		// Field by field, and by pointer: a struct built and then copied
		// (an argument on the stack, a value returned) is re-read with
		// wider loads than it was written with, which stalls on store
		// forwarding.
		opd.imm, opd.hasImm, opd.compare, opd.swap, opd.id, opd.unsig = o.Imm, o.HasImm, o.Compare, o.Swap, o.ID, o.Unsignaled
		if !q.prepare(w, o.Op, &o.Local, &o.Remote, dl, c, &opd, &ch) {
			continue
		}
		if w.staged.Load() { // a device local (stage.go)
			q.stagePost(w, c)
		} else if (w.owner.Load() == q && w.wr.CancelCause() == nil) || q.ready(w) { // ready's common case first, inline
			ready = append(ready, &w.wr)
		}
	}
	ch.giveBack(q)
	if r := ch.local.Last(); r != nil && r != q.near.Load() {
		q.near.Store(r)
	}
	q.postList(ready, c)
	clear(ready) // hold no request past the post
	*chain = ready[:0]
	chains.Put(chain)
}

// postList posts the prepared and readied requests of ready as chains,
// failing each the route refuses on its own.
func (q *QueuePair) postList(ready []*backend.WorkRequest, c context.Context) {
	for len(ready) > 0 {
		n, err := q.list.PostList(ready)
		if n >= len(ready) {
			break
		}
		q.postFailed(wrOf(ready[n]), err, c)
		ready = ready[n+1:] // untouched: post them on
	}
}

// chains holds PostOps's scratch lists of backend work requests.
var chains = sync.Pool{New: func() any { s := make([]*backend.WorkRequest, 0, 64); return &s }}

// wrOf is the WorkRequest whose backend request bw is.
func wrOf(bw *backend.WorkRequest) *WorkRequest { return (*WorkRequest)(bw.Done.(*completer)) }

// armFast arms w for o as prepare (and ready) would, for the chain's
// common case only: a Put or Get that passes the checks, host memory
// resolved from the chain's run, a slot and an entry taken with the
// chain's, w neither pending nor queued, no batch, no token to drain, no
// cancel cause, last posted on q. It reports took false, changing
// nothing, when the case is not that one: then prepare arms w; else ok
// says whether w is ready to post (false: a Cancel came first, and w is
// finished with its cause). The caller knows there is no observer, that
// q.reg is set, and that the chain's ctx (its Done channel: cancel, nil
// for none) had not ended when the chain began.
func (q *QueuePair) armFast(w *WorkRequest, o *Op, dl time.Time, cancel <-chan struct{}, ch *chainPrep) (took, ok bool) {
	s := w.state.Load()
	if !q.plainOK(o.Op, &o.Local, &o.Remote) || o.Local.Location != buffer.Host ||
		(ch.cq != nil && ch.slots == 0) || ch.entries == 0 ||
		(s != stateIdle && s != stateDone) || (s == stateDone && w.queued) || // read after the state: see WorkRequest.queued
		w.batch != nil || w.sig == nil || w.want.Load() != 0 || w.staged.Load() ||
		w.owner.Load() != q || w.wr.CancelCause() != nil {
		return false, false
	}
	mem, ok := ch.local.Next(&o.Local, &w.ref)
	if !ok {
		return false, false
	}
	w.state.setOwned(statePending) // from idle or done: the owner's alone (reqState.setOwned)
	wr := &w.wr
	wr.Remote = o.Remote // a statement of its own: see reset
	wr.Op, wr.Local, wr.LocalRegion = o.Op, mem, ch.local.Last()
	wr.Deadline, wr.Done, wr.Cancel, wr.Result = dl, (*completer)(w), cancel, 0
	w.dlMono = 0
	wr.Via, wr.Origin, wr.Waited = 0, 0, false
	wr.Imm, wr.HasImm, wr.Compare, wr.Swap = o.Imm, o.HasImm, o.Compare, o.Swap
	w.id = o.ID
	ch.give(w, q)
	if ch.cq != nil {
		q.enlist(w, o.Unsignaled)
	}
	if w.wr.CancelCause() != nil { // a Cancel from elsewhere since the check: ready reports it
		return true, q.ready(w)
	}
	if testHookArmFast != nil {
		testHookArmFast()
	}
	return true, true
}

// testHookArmFast, when set (tests only), is called for each request
// armFast arms.
var testHookArmFast func()

// give hands w one of ch's queue slots (when the chain reports to a
// queue; its fast count comes from the chain's) and one of its entries
// into q.ops, and binds w to q: armFast's share of the chain (runInline
// takes a run's at once: giveRun).
func (ch *chainPrep) give(w *WorkRequest, q *QueuePair) {
	if cq := ch.cq; cq != nil {
		ch.slots--
		w.cq = cq
		if w.fast = !q.slow; w.fast {
			if ch.fast > 0 {
				ch.fast--
			} else {
				cq.fast.Add(1)
			}
		}
	}
	ch.entries--
	w.qp = q
}

// giveRun is give for k operations of an inline run at once (runInline):
// their slots (fast ones when fast, each w.fast set already) and entries.
// It does not bind the requests to q and ch.cq: a run reported inline
// has no finisher to read them (unrun binds a declined run's).
func (ch *chainPrep) giveRun(k int64, fast bool) {
	ch.slots -= k
	ch.entries -= k
	if fast {
		nf := min(k, ch.fast)
		ch.fast -= nf
		if k > nf {
			ch.cq.fast.Add(k - nf)
		}
	}
}
