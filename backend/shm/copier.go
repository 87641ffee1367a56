//go:build linux

package shm

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// mapTimeout bounds the owner's answer to a map request: its manager
// answers at once (a registry lookup), so silence means it is stuck or
// gone, and the route fails.
const mapTimeout = 5 * time.Second

// copier runs the queued operations in order: the first use of a region
// (a map request to the owner) and copies over InlineMax.
func (r *route) copier() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		for len(r.queue) == 0 {
			r.mu.Unlock()
			select {
			case <-r.wake:
			case <-r.stop:
				r.drainQueue()
				return
			}
			r.mu.Lock()
		}
		wr := r.queue[0]
		r.queue = r.queue[1:]
		r.cur = wr
		r.mu.Unlock()
		err, handed := r.run(wr)
		r.mu.Lock()
		r.cur = nil
		r.mu.Unlock()
		<-r.room
		select {
		case <-r.poke: // a cancel of wr that came too late
		default:
		}
		if !handed {
			r.finish(wr, err)
		}
	}
}

// drainQueue fails what is still queued once the route closed.
func (r *route) drainQueue() {
	r.mu.Lock()
	q := r.queue
	r.queue = nil
	r.mu.Unlock()
	for _, wr := range q {
		<-r.room
		r.finish(wr, r.st.Err())
	}
}

// run does one queued operation; handed reports that it went to the
// fallback route, which completes it.
func (r *route) run(wr *backend.WorkRequest) (err error, handed bool) {
	if err := r.ended(wr); err != nil {
		return err, false
	}
	if !r.gate.Enter() {
		return r.st.Err(), false
	}
	defer r.gate.Leave()
	if wr.Op == backend.OpSend {
		return r.sendMessage(wr), false
	}
	e := r.cache.get(wr.Remote.Region, wr.Remote.Key)
	if e == nil {
		if e, err = r.mapRegion(wr); err != nil {
			return err, false
		}
	}
	defer r.cache.unref(e)
	if s, ok := deviceLocal(wr); ok {
		return r.runDeviceLocal(e, wr, s), false
	}
	if e.dev != nil {
		return r.copyDevice(e, wr), false
	}
	if e.fallback {
		r.st.Unbegin()
		if err := r.postFallback(wr); err != nil {
			r.st.Begin()
			return err, false
		}
		return nil, true
	}
	switch wr.Op {
	case backend.OpCompareSwap, backend.OpFetchAdd:
		return r.atomic(e, wr), false
	case backend.OpWriteImm:
		if err := r.copy(e, wr, true); err != nil {
			return err, false
		}
		return r.notify(e, wr), false
	}
	return r.copy(e, wr, true), false
}

// ended returns why wr must end now: the route failed, wr was cancelled
// or its deadline passed; nil to go on.
func (r *route) ended(wr *backend.WorkRequest) error {
	if err := r.st.Err(); err != nil {
		return err
	}
	if cause := wr.CancelCause(); cause != nil {
		return routestate.OpError("shm", wr, cause)
	}
	if !wr.Deadline.IsZero() && time.Now().After(wr.Deadline) {
		return routestate.OpError("shm", wr, rdmamgr.ErrDeadline)
	}
	return nil
}

// mapRegion asks the owner for wr's remote region and installs the
// answer: a mapping, or a note that the region goes to the fallback. The
// entry comes with a reference.
func (r *route) mapRegion(wr *backend.WorkRequest) (*entry, error) {
	wait := func(req uint64, ch chan mapReply) (mapReply, error) {
		return r.await(wr, req, ch)
	}
	need := wr.Op.Need()
	if r.wantsDevice(wr) {
		need |= needDevice
	}
	e, code, err := r.mapEntry(wr.Remote.Region, wr.Remote.Key, need, wait, wr, nil)
	if err == nil && code == rdmapb.Code_ACCESS_DENIED && need&needDevice != 0 {
		// An owner that does not know needDevice refuses the bit: ask as
		// before (it answers a device region NOT_SUPPORTED).
		e, code, err = r.mapEntry(wr.Remote.Region, wr.Remote.Key, need&^needDevice, wait, wr, nil)
	}
	switch {
	case err != nil:
		return nil, err
	case code == rdmapb.Code_NOT_SUPPORTED:
		return r.installFallback(wr)
	case code != rdmapb.Code_OK:
		return nil, &backend.RemoteError{Code: code, Op: wr.Op}
	}
	return e, nil
}

// mapEntry asks the owner for region id under key, needing need, waits
// for the answer with wait, and installs the mapping: the entry comes with
// a reference. A refusal is its code (nil entry, nil error). The request
// is the operation wr's or a caller's with ctx (writeRequest).
func (r *route) mapEntry(id uint64, key buffer.Key, need buffer.Access, wait func(req uint64, ch chan mapReply) (mapReply, error),
	wr *backend.WorkRequest, ctx context.Context) (*entry, rdmapb.Code, error) {
	req, ch := r.newRequest()
	msg := mapMsg{req: req, region: id, key: key, need: need}
	if err := r.writeRequest(msg.encode(), wr, ctx); err != nil {
		r.forget(req, ch)
		return nil, 0, err
	}
	rep, err := wait(req, ch)
	if err != nil {
		return nil, 0, err
	}
	if rep.m.code != uint32(rdmapb.Code_OK) {
		rep.close()
		return nil, rdmapb.Code(rep.m.code), nil
	}
	if rep.dev != nil {
		if need&needDevice == 0 {
			r.fail(fmt.Errorf("shm: device map reply to a host map request: %w", rdmamgr.ErrProtocol))
			return nil, 0, r.st.Err()
		}
		return r.installDevice(id, key, rep.dev)
	}
	if rep.fd < 0 || rep.m.slot == 0 || rep.m.slot >= tableSlots {
		rep.close()
		r.fail(fmt.Errorf("shm: map reply slot %d fd %d: %w", rep.m.slot, rep.fd, rdmamgr.ErrProtocol))
		return nil, 0, r.st.Err()
	}
	e := &entry{id: id, key: key, slot: rep.m.slot, access: rep.m.access}
	evicted, err := r.cache.install(e, rep.fd, rep.m.off, rep.m.len)
	if err != nil {
		r.fail(err)
		return nil, 0, r.st.Err()
	}
	r.tellEvicted(evicted)
	e.refs.Add(1)
	return e, rdmapb.Code_OK, nil
}

func (rep *mapReply) close() {
	p := packet{fd: rep.fd}
	p.close()
}

// installFallback notes that a region is not memfd-backed.
func (r *route) installFallback(wr *backend.WorkRequest) (*entry, error) {
	e := &entry{id: wr.Remote.Region, key: wr.Remote.Key, fallback: true}
	evicted, err := r.cache.install(e, -1, 0, 0)
	if err != nil {
		return nil, err
	}
	r.tellEvicted(evicted)
	e.refs.Add(1)
	return e, nil
}

// tellEvicted tells the owner which regions we unmapped (best effort).
func (r *route) tellEvicted(es []*entry) {
	for _, e := range es {
		if !e.fallback {
			_ = writePacket(r.conn, slotMsg(msgUnmap, e.slot, e.id), -1)
		}
	}
}

// await waits for the answer to map request req, wr's cancellation or
// deadline, or the route's end.
func (r *route) await(wr *backend.WorkRequest, req uint64, ch chan mapReply) (mapReply, error) {
	limit := time.NewTimer(mapTimeout)
	defer limit.Stop()
	var dl <-chan time.Time
	if !wr.Deadline.IsZero() {
		t := time.NewTimer(time.Until(wr.Deadline))
		defer t.Stop()
		dl = t.C
	}
	for {
		select {
		case rep, ok := <-ch:
			if !ok {
				return mapReply{fd: -1}, r.st.Err()
			}
			return rep, nil
		case <-r.poke:
			if cause := wr.CancelCause(); cause != nil {
				r.forget(req, ch)
				return mapReply{fd: -1}, routestate.OpError("shm", wr, cause)
			}
		case <-dl:
			r.forget(req, ch)
			return mapReply{fd: -1}, routestate.OpError("shm", wr, rdmamgr.ErrDeadline)
		case <-limit.C:
			r.forget(req, ch)
			r.fail(errOwnerSilent)
			return mapReply{fd: -1}, r.st.Err()
		case <-r.stop:
			r.forget(req, ch)
			return mapReply{fd: -1}, r.st.Err()
		}
	}
}

// forget stops waiting for req on ch; an answer already delivered is
// dropped here, a later one by the reader.
func (r *route) forget(req uint64, ch chan mapReply) {
	r.mu.Lock()
	delete(r.replies, req)
	r.mu.Unlock()
	select {
	case rep, ok := <-ch:
		if ok {
			rep.close()
		}
	default:
	}
}
