//go:build ibverbs

package ibverbs

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Post splits wr into work requests of at most the device's message size
// and posts them as one chain.
func (r *route) Post(wr *backend.WorkRequest) error {
	b := r.b
	raddr, err := r.check(wr)
	if err != nil {
		return err
	}
	lkey, laddr, err := r.localKey(wr)
	if err != nil {
		return err
	}
	n := uint64(len(wr.Local))
	count := int((n + b.maxMsg - 1) / b.maxMsg)
	if count > b.inflight {
		return fmt.Errorf("ibverbs: %d-byte operation needs %d work requests of at most %d bytes, limit %d: %w",
			n, count, b.maxMsg, b.inflight, backend.ErrLimit)
	}
	if err := r.Err(); err != nil {
		return err
	}
	if !wr.Deadline.IsZero() && time.Now().After(wr.Deadline) {
		return fmt.Errorf("ibverbs: %s of %d bytes posted after its deadline: %w", wr.Op, n, backend.ErrDeadline)
	}
	if err := r.reserve(count, wr); err != nil {
		return err
	}
	opcode := wrRDMARead
	if wr.Op == backend.OpWrite {
		opcode = wrRDMAWrite
	}
	o := &op{wr: wr, r: r, chunks: make([]chunk, count)}
	o.remaining.Store(int32(count))
	batch := make(wrBuf, 0, count)
	ids := make([]uint64, count)
	for i := range count {
		off := uint64(i) * b.maxMsg
		ln := min(b.maxMsg, n-off)
		o.chunks[i] = chunk{r: r, op: o}
		ids[i] = b.slots.alloc(&o.chunks[i])
		batch.add(ids[i], laddr+off, raddr+off, uint32(ln), lkey, wr.Remote.RDMA.RKey, opcode)
	}
	return r.submit(o, batch, ids)
}

// check validates wr for this route (routestate.Validate and what RDMA
// adds) and returns the remote address of its first byte.
func (r *route) check(wr *backend.WorkRequest) (raddr uint64, err error) {
	if err := routestate.Validate("ibverbs", wr); err != nil {
		return 0, err
	}
	if r.accepted {
		return 0, fmt.Errorf("ibverbs: post on an accepted queue pair: %w", backend.ErrProtocol)
	}
	if wr.Remote.RDMA == (buffer.RDMAKey{}) {
		return 0, fmt.Errorf("ibverbs: %v has no RDMA key (its owner has no RDMA backend): %w", wr.Remote, backend.ErrNotSupported)
	}
	n := uint64(len(wr.Local))
	raddr = wr.Remote.RDMA.Addr + wr.Remote.Offset
	if raddr < wr.Remote.RDMA.Addr || raddr+n < raddr {
		return 0, fmt.Errorf("ibverbs: remote address %#x + %d + %d overflows: %w", wr.Remote.RDMA.Addr, wr.Remote.Offset, n, buffer.ErrOutOfRange)
	}
	return raddr, nil
}

// reserve waits for room for count work requests (back-pressure): on the
// queue pair, then on the completion queue, until wr's deadline, the
// route's end or the poster's cancel.
func (r *route) reserve(count int, wr *backend.WorkRequest) error {
	switch r.sem.acquire(count, wr.Deadline, r.Done(), wr.Cancel) {
	case semTimeout:
		return fmt.Errorf("ibverbs: waiting for room in flight: %w", backend.ErrDeadline)
	case semDone:
		return r.Err()
	case semCanceled:
		return fmt.Errorf("ibverbs: waiting for room in flight: %w", context.Canceled)
	}
	switch r.b.cqBudget.acquire(count, wr.Deadline, r.Done(), wr.Cancel) {
	case semTimeout:
		r.sem.release(count)
		return fmt.Errorf("ibverbs: waiting for room on the completion queue: %w", backend.ErrDeadline)
	case semDone:
		r.sem.release(count)
		return r.Err()
	case semCanceled:
		r.sem.release(count)
		return fmt.Errorf("ibverbs: waiting for room on the completion queue: %w", context.Canceled)
	}
	return nil
}

// submit posts o's batch, unless the route is failing; ids are the slots
// of its work requests, whose room reserve took.
func (r *route) submit(o *op, batch wrBuf, ids []uint64) error {
	b, wr, count := r.b, o.wr, len(ids)
	r.postMu.Lock()
	if r.failing {
		r.postMu.Unlock()
		for _, id := range ids {
			b.slots.take(id)
		}
		r.sem.release(count)
		b.cqBudget.release(count)
		return r.Err()
	}
	r.opsMu.Lock()
	r.ops[o] = struct{}{}
	r.opsMu.Unlock()
	r.Begin()
	r.outstanding.Add(int64(count))
	r.lastActive.Store(time.Now().UnixNano())
	posted, perr := r.qp.post(batch)
	r.postMu.Unlock()
	if perr != nil {
		return r.postFailed(o, ids, posted, perr)
	}
	if wr.CancelCause() != nil { // cancelled while it was being posted
		r.Cancel(wr)
	}
	b.kickWatchdog()
	return nil
}

// postFailed handles a post of which the device took only the first
// posted work requests: the others were never seen by it. The queue pair
// is in trouble; the route fails so that what was posted is flushed. With
// nothing posted, Post fails (o is never reported); else o is reported
// once its posted work requests are flushed.
func (r *route) postFailed(o *op, ids []uint64, posted int, perr error) error {
	b := r.b
	left := len(ids) - posted
	for _, id := range ids[posted:] {
		b.slots.take(id)
	}
	r.sem.release(left)
	b.cqBudget.release(left)
	r.fail(fmt.Errorf("ibverbs: route failed: %w: %w", perr, backend.ErrClosed))
	if posted == 0 {
		r.opsMu.Lock()
		delete(r.ops, o)
		r.opsMu.Unlock()
		r.Unbegin()
		r.wrDone(int64(left))
		return fmt.Errorf("%w: %w", perr, backend.ErrClosed)
	}
	e := fmt.Errorf("%w: %w", perr, backend.ErrClosed)
	o.firstErr.CompareAndSwap(nil, &e)
	if o.remaining.Add(-int32(left)) == 0 {
		r.finish(o)
	}
	r.wrDone(int64(left))
	return nil
}

// localKey checks that wr.Local lies in wr.LocalRegion, which this backend
// registered, and returns its lkey and address.
func (r *route) localKey(wr *backend.WorkRequest) (uint32, uint64, error) {
	reg := wr.LocalRegion
	if reg == nil {
		return 0, 0, fmt.Errorf("ibverbs: work request without its local region: %w", buffer.ErrInvalid)
	}
	rd, ok := reg.BackendData.(*regData)
	if !ok || rd.b != r.b {
		return 0, 0, fmt.Errorf("ibverbs: local region %d is not registered with this device: %w", reg.ID(), backend.ErrNotSupported)
	}
	mem := reg.Mem()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(wr.Local)))
	if p < base || p-base > uintptr(len(mem)) || uintptr(len(wr.Local)) > uintptr(len(mem))-(p-base) {
		return 0, 0, fmt.Errorf("ibverbs: local memory is not inside region %d: %w", reg.ID(), buffer.ErrOutOfRange)
	}
	return rd.local.lkey, uint64(p), nil
}
