//go:build ibverbs

package ibverbs

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// The post paths of Send and the atomics (Put, Get and PutWithImm are in
// post.go).

// prepSend prepares a Send: one SEND of a header (a cell of the ring) and the
// message, into the owner's ring; the owner copies it into the receive
// buffer its manager posted and acks.
func (r *route) prepSend(wr *backend.WorkRequest, ch *chain, wait bool) error {
	n := len(wr.Local)
	if n > r.maxSend {
		return fmt.Errorf("ibverbs: send of %d bytes, the peer takes at most %d (its MaxSend): %w", n, r.maxSend, rdmamgr.ErrLimit)
	}
	if wr.Via != 0 && !r.peerAgent {
		return errViaNotAgent
	}
	lkey, laddr, err := r.localKey(wr)
	if err != nil {
		return err
	}
	if err := r.ready(wr, ch); err != nil {
		return err
	}
	if err := r.reserve(1, true, wr, wait); err != nil {
		return err
	}
	o := r.newOp(wr, 1, true)
	ch.addOp(o)
	cell := r.takeCell()
	o.chunks[0].cell, o.ctlCell = cell+1, cell
	m := ctlMsg{kind: ctlSend, hasImm: wr.HasImm, imm: wr.Imm}
	if wr.Via != 0 { // for the process at via of the far agent
		m.via, m.slot, m.origin = true, wr.Via, wr.Origin
	}
	size := m.put(r.ring.cell(cell))
	id := ch.addID(r.b.slots.alloc(&o.chunks[0]))
	ch.batch.addSend(id, r.ring.cellAddr(cell), uint32(size), r.ring.mr.lkey, laddr, uint32(n), lkey)
	return nil
}

// prepAtomic prepares a CompareAndSwap or FetchAdd: one atomic work request
// whose old value the device writes into a cell of the ring; completed
// copies it to wr.Result.
func (r *route) prepAtomic(wr *backend.WorkRequest, ch *chain, wait bool) error {
	if !r.atomics {
		why := "the peer's device does not run atomics"
		if !r.b.atomics {
			why = "this device does not run atomics"
		}
		return fmt.Errorf("ibverbs: %s: %s: %w", wr.Op, why, rdmamgr.ErrNotSupported)
	}
	var (
		raddr uint64
		ve    *viaEntry // the far agent's proxy (wr.Via), held
	)
	rkey := wr.Remote.RDMA.RKey
	if wr.Via != 0 {
		e, a, err := r.viaTarget(wr, buffer.AccessAtomic, 8, wait)
		if err != nil {
			return err
		}
		raddr, rkey, ve = a, e.res.rkey, e
	} else {
		a, err := r.remoteAddr(wr, 8)
		if err != nil {
			return err
		}
		raddr = a
	}
	if raddr%8 != 0 {
		r.viaRelease(ve)
		return fmt.Errorf("ibverbs: %s on remote address %#x: %w", wr.Op, raddr, rdmamgr.ErrMisaligned)
	}
	if err := r.ready(wr, ch); err != nil {
		r.viaRelease(ve)
		return err
	}
	if err := r.reserve(1, false, wr, wait); err != nil {
		r.viaRelease(ve)
		return err
	}
	o := r.newOp(wr, 1, false)
	o.ve = ve
	ch.addOp(o)
	cell := r.takeCell()
	o.chunks[0].cell = cell + 1
	opcode, compareAdd := wrAtomicCAS, wr.Compare
	if wr.Op == backend.OpFetchAdd {
		opcode, compareAdd = wrAtomicFAA, wr.Swap
	}
	id := ch.addID(r.b.slots.alloc(&o.chunks[0]))
	ch.batch.addAtomic(id, r.ring.cellAddr(cell), r.ring.mr.lkey, raddr, rkey, opcode, compareAdd, wr.Swap)
	return nil
}

// cellDone releases the cell of c, first reading an atomic's old value
// from it if the work request succeeded.
func (r *route) cellDone(c *chunk, status uint32) {
	if c.cell == 0 {
		return
	}
	if status == wcSuccess && c.op.wr.Op.Atomic() {
		// The device wrote the word in host order (as rxe does; see the
		// package doc on byte order).
		c.op.result = binary.NativeEndian.Uint64(r.ring.cell(c.cell - 1))
	}
	r.ring.freeCell(c.cell - 1)
	c.cell = 0
}
