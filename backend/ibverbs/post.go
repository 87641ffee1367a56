//go:build ibverbs

package ibverbs

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Post posts wr: a Put or Get (with a notice: PutWithImm) as RDMA WRITE or
// READ work requests of at most the device's message size in one chain; a
// Send or an atomic as one work request (ops.go).
func (r *route) Post(wr *backend.WorkRequest) error {
	if r.fb != nil && toFallback(wr) {
		return r.postFallback(wr)
	}
	r.ringMu.RLock() // the ring stays while prepare writes its cells (route.ringMu)
	defer r.ringMu.RUnlock()
	ch := getChain()
	defer putChain(ch)
	if err := r.prepare(wr, ch, true); err != nil {
		return err
	}
	_, err := r.submit(ch)
	return err
}

// postFallback posts wr on the fallback route (toFallback), unless the
// route has failed or wr is not for it; the fallback reports it.
func (r *route) postFallback(wr *backend.WorkRequest) error {
	if err := r.Err(); err != nil {
		return err
	}
	if r.accepted {
		return fmt.Errorf("ibverbs: post on an accepted queue pair: %w", rdmamgr.ErrProtocol)
	}
	return r.fb.Post(wr)
}

// prepare checks wr, takes its room (waiting for it with wait, else
// failing with errWouldWait) and appends its work requests to ch.
func (r *route) prepare(wr *backend.WorkRequest, ch *chain, wait bool) error {
	if err := routestate.ValidateAll("ibverbs", wr); err != nil {
		return err
	}
	if r.accepted {
		return fmt.Errorf("ibverbs: post on an accepted queue pair: %w", rdmamgr.ErrProtocol)
	}
	if err := checkOrigin(wr); err != nil {
		return err
	}
	switch wr.Op {
	case backend.OpSend:
		return r.prepSend(wr, ch, wait)
	case backend.OpCompareSwap, backend.OpFetchAdd:
		return r.prepAtomic(wr, ch, wait)
	}
	return r.prepRW(wr, ch, wait)
}

// prepRW prepares a Put, Get or PutWithImm.
func (r *route) prepRW(wr *backend.WorkRequest, ch *chain, wait bool) error {
	b := r.b
	n := uint64(len(wr.Local))
	lkey, laddr, err := r.localKey(wr)
	if err != nil {
		return err
	}
	count := int((n + b.maxMsg - 1) / b.maxMsg)
	notice := wr.Op == backend.OpWriteImm
	if notice && !wr.Remote.Access.Allows(buffer.AccessNotify) {
		// The device enforces AccessWrite, not AccessNotify: a handle
		// without it is refused before its bytes land (a forged one is
		// refused by the owner, after: it could Put them anyway).
		return fmt.Errorf("ibverbs: %s to a %s buffer: %w", wr.Op, wr.Remote.Access, rdmamgr.ErrAccess)
	}
	if notice && wr.Remote.Location != buffer.Host {
		return errDeviceNotice(wr) // dmabuf.go
	}
	var (
		raddr uint64
		rkey  = wr.Remote.RDMA.RKey
		ve    *viaEntry // the far agent's proxy (wr.Via), held
	)
	if wr.Via != 0 {
		need := buffer.AccessRead
		switch wr.Op {
		case backend.OpWrite:
			need = buffer.AccessWrite
		case backend.OpWriteImm:
			need = buffer.AccessWrite | buffer.AccessNotify
		}
		if ve, raddr, err = r.viaTarget(wr, need, n, wait); err != nil {
			return err
		}
		rkey = ve.res.rkey
	} else if raddr, err = r.remoteAddr(wr, n); err != nil {
		return err
	}
	wrs := count
	if notice {
		wrs++
	}
	if wrs > b.inflight {
		r.viaRelease(ve)
		return fmt.Errorf("ibverbs: %d-byte operation needs %d work requests of at most %d bytes, limit %d: %w",
			n, wrs, b.maxMsg, b.inflight, rdmamgr.ErrLimit)
	}
	if err := r.ready(wr, ch); err != nil {
		r.viaRelease(ve)
		return err
	}
	if err := r.reserve(wrs, notice, wr, wait); err != nil {
		r.viaRelease(ve)
		return err
	}
	opcode := wrRDMARead
	if wr.Op != backend.OpRead {
		opcode = wrRDMAWrite
	}
	o := r.newOp(wr, wrs, notice)
	o.ve = ve
	ch.addOp(o)
	for i := range count {
		off := uint64(i) * b.maxMsg
		ln := min(b.maxMsg, n-off)
		ch.batch.add(ch.addID(b.slots.alloc(&o.chunks[i])), laddr+off, raddr+off, uint32(ln), lkey, rkey, opcode)
	}
	if notice { // after the writes: RC delivers it once their bytes are in place
		if testHookNoticeCell != nil {
			testHookNoticeCell(r)
		}
		cell := r.takeCell()
		o.chunks[count].cell, o.ctlCell = cell+1, cell
		m := ctlMsg{kind: ctlNotice, imm: wr.Imm, region: wr.Remote.Region, offset: wr.Remote.Offset, length: n, key: wr.Remote.Key}
		if wr.Via != 0 { // the far agent's proxy, and who it is for
			m.via, m.region, m.key, m.origin = true, ve.res.proxy, ve.res.proxyKey, wr.Origin
		}
		size := m.put(r.ring.cell(cell))
		ch.batch.addSend(ch.addID(b.slots.alloc(&o.chunks[count])), r.ring.cellAddr(cell), uint32(size), r.ring.mr.lkey, 0, 0, 0)
	}
	return nil
}

// newOp returns the op of wr with wrs chunks; with ack it awaits the
// owner's ack too.
func (r *route) newOp(wr *backend.WorkRequest, wrs int, ack bool) *op {
	o := &op{wr: wr, r: r, ack: ack}
	if wrs == 1 {
		o.chunks = o.one[:]
	} else {
		o.chunks = make([]chunk, wrs)
	}
	for i := range o.chunks {
		o.chunks[i] = chunk{r: r, op: o}
	}
	rem := int32(wrs)
	if ack {
		rem++
	}
	o.remaining.Store(rem)
	return o
}

// ready fails wr if the route has failed or wr's deadline has passed. The
// clock is read once per chain (a PostList's operations share the read),
// and only for operations with a deadline.
func (r *route) ready(wr *backend.WorkRequest, ch *chain) error {
	if err := r.Err(); err != nil {
		return err
	}
	if wr.Deadline.IsZero() {
		return nil
	}
	if ch.now == 0 {
		ch.now = time.Now().UnixNano()
	}
	if wr.Deadline.UnixNano() <= ch.now {
		return fmt.Errorf("ibverbs: %s of %d bytes posted after its deadline: %w", wr.Op, len(wr.Local), rdmamgr.ErrDeadline)
	}
	return nil
}

// remoteAddr returns the remote address of the first of n bytes of wr.
func (r *route) remoteAddr(wr *backend.WorkRequest, n uint64) (raddr uint64, err error) {
	if wr.Remote.RDMA == (buffer.RDMAKey{}) {
		if wr.Remote.Location != buffer.Host {
			return 0, noDeviceKey(wr) // dmabuf.go
		}
		return 0, fmt.Errorf("ibverbs: %v has no RDMA key (its owner has no RDMA backend): %w", wr.Remote, rdmamgr.ErrNotSupported)
	}
	raddr = wr.Remote.RDMA.Addr + wr.Remote.Offset
	if raddr < wr.Remote.RDMA.Addr || raddr+n < raddr {
		return 0, fmt.Errorf("ibverbs: remote address %#x + %d + %d overflows: %w", wr.Remote.RDMA.Addr, wr.Remote.Offset, n, rdmamgr.ErrOutOfRange)
	}
	return raddr, nil
}

// reserve waits for room for count work requests (back-pressure): for a
// control message (ctl) a credit of the peer's ring, then room on the
// queue pair, then on the completion queue, until wr's deadline, the
// route's end or the poster's cancel. Without wait it takes the room only
// if it is free now, else fails with errWouldWait having taken nothing.
func (r *route) reserve(count int, ctl bool, wr *backend.WorkRequest, wait bool) error {
	if !wait {
		return r.tryReserve(count, ctl)
	}
	if ctl {
		if err := semErr(r.credits.acquire(1, wr.Deadline, r.Done(), wr.Cancel), r, "a slot of the peer's ring"); err != nil {
			return err
		}
	}
	if err := semErr(r.sem.acquire(count, wr.Deadline, r.Done(), wr.Cancel), r, "room in flight"); err != nil {
		if ctl {
			r.credits.release(1)
		}
		return err
	}
	if err := semErr(r.b.cqBudget.acquire(count, wr.Deadline, r.Done(), wr.Cancel), r, "room on the completion queue"); err != nil {
		r.sem.release(count)
		if ctl {
			r.credits.release(1)
		}
		return err
	}
	return nil
}

// unreserve gives back what reserve took.
func (r *route) unreserve(count int, ctl bool) {
	r.sem.release(count)
	r.b.cqBudget.release(count)
	if ctl {
		r.credits.release(1)
	}
}

// tryReserve is reserve without waiting.
func (r *route) tryReserve(count int, ctl bool) error {
	if ctl && !r.credits.tryAcquire(1) {
		return errWouldWait
	}
	if !r.sem.tryAcquire(count) {
		if ctl {
			r.credits.release(1)
		}
		return errWouldWait
	}
	if !r.b.cqBudget.tryAcquire(count) {
		r.sem.release(count)
		if ctl {
			r.credits.release(1)
		}
		return errWouldWait
	}
	return nil
}

// semErr is the error of a wait for what that ended with res.
func semErr(res int, r *route, what string) error {
	switch res {
	case semTimeout:
		return fmt.Errorf("ibverbs: waiting for %s: %w", what, rdmamgr.ErrDeadline)
	case semDone:
		return r.Err()
	case semCanceled:
		return fmt.Errorf("ibverbs: waiting for %s: %w", what, context.Canceled)
	}
	return nil
}

// takeCell takes a cell of the initiator's ring for one work request; it
// has room in flight (r.sem), and there are as many cells as that.
// testHookNoticeCell, when set by a test, runs as a PutWithImm's notice
// takes its cell, before the cell is written.
var testHookNoticeCell func(r *route)

func (r *route) takeCell() int {
	c, ok := r.ring.allocCell()
	if !ok {
		panic("ibverbs: no free cell with room in flight")
	}
	return c
}

// localKey checks that wr.Local lies in wr.LocalRegion, which this backend
// registered, and returns its lkey and address.
func (r *route) localKey(wr *backend.WorkRequest) (uint32, uint64, error) {
	reg, _ := wr.LocalRegion.(*memreg.Region)
	if reg == nil {
		return 0, 0, fmt.Errorf("ibverbs: work request without its local region: %w", rdmamgr.ErrInvalid)
	}
	rd, ok := reg.BackendData.(*regData)
	if !ok || rd.b != r.b {
		return 0, 0, fmt.Errorf("ibverbs: local region %d is not registered with this device: %w", reg.ID(), rdmamgr.ErrNotSupported)
	}
	mem := reg.Mem()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(wr.Local)))
	if p < base || p-base > uintptr(len(mem)) || uintptr(len(wr.Local)) > uintptr(len(mem))-(p-base) {
		return 0, 0, fmt.Errorf("ibverbs: local memory is not inside region %d: %w", reg.ID(), rdmamgr.ErrOutOfRange)
	}
	return rd.local.lkey, uint64(p), nil
}
