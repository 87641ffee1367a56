//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// drainBound is how long a connection that ended waits for its peer's
// copies before it lets its regions go: a process that died never lowers
// its counts (and copies nothing any more); a live one that closed its
// route had finished its copies first.
const drainBound = 100 * time.Millisecond

// stuckBound is how long a cut waits for a live peer's copies in the
// region (a variable for tests). A running peer leaves within one 256 KiB
// piece; one stopped mid-copy (SIGSTOP, a debugger) or that writes its
// table to look busy does not. Past the bound the owner gives up on the
// peer: it ends the peer's connection (its route fails) and lets the
// region go, quarantined (memreg: its memory is never handed to another
// buffer, since the peer may still write it). So Revoke and Release
// return within stuckBound whatever the peer does.
var stuckBound = 2 * time.Second

// export is one region a connection's peer mapped: the reference that
// keeps it registered (a remote reference: Revoke and Release wait for
// it) and its slot in the state table.
type export struct {
	ref  memreg.Ref
	id   uint64
	slot uint32
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// mapRegion answers a map request: a memfd holding the region's pages
// only (memreg's Ref.ExportFD: read-only for a read-only region) and the
// region's place in it, after the same checks as any remote request
// (region, key, access, revocation, lease). It returns the reply and the
// fd to pass (-1: none), which the caller closes once passed.
//
// A request with needDevice (an initiator that opens CUDA IPC handles)
// may map a device region: its reply is then dev (msgMappedDevice), with
// the region's IPC handle (memreg's Ref.ExportIPC: an allocation of its
// own, readable and writable) instead of a fd. Without the flag a device
// region is refused with NOT_SUPPORTED (the initiator's fallback stages it).
func (c *serverConn) mapRegion(m mapMsg) (mappedMsg, int, *mappedDeviceMsg) {
	rep := mappedMsg{req: m.req}
	refuse := func(err error) (mappedMsg, int, *mappedDeviceMsg) {
		rep.code = uint32(backend.RemoteCode(err))
		c.mu.Lock()
		c.rejected++
		c.mu.Unlock()
		return rep, -1, nil
	}
	device := m.need&needDevice != 0
	m.need &^= needDevice
	if m.need == 0 {
		m.need = buffer.AccessRead
	}
	acquire := c.b.reg.AcquireRemote
	if device {
		acquire = c.b.reg.AcquireRemoteAny
	}
	ref, err := acquire(m.region, m.key, 0, 1, m.need)
	if err != nil {
		return refuse(err)
	}
	r := ref.Region()
	var dev *mappedDeviceMsg
	fd, off := -1, uint64(0)
	if _, ok := ref.Device(); ok {
		h, ord, _, err := ref.ExportIPC()
		if err != nil {
			ref.Release()
			return refuse(err)
		}
		dev = &mappedDeviceMsg{req: m.req, handle: h, dev: uint32(ord)}
	} else {
		// Only the region's own pages, with the region's access (memreg).
		if fd, off, err = ref.ExportFD(c.b.reg); err != nil {
			ref.Release()
			return refuse(err)
		}
	}
	passed := false
	defer func() {
		if !passed && fd >= 0 {
			unix.Close(fd)
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.exports[r.ID()]; e != nil { // mapped again (the peer evicted it): same slot
		ref.Release()
		rep.slot = e.slot
	} else {
		slot, ok := c.takeSlot()
		if !ok {
			ref.Release()
			c.rejected++
			rep.code = uint32(rdmapb.Code_RESOURCE_EXHAUSTED)
			return rep, -1, nil
		}
		e = &export{ref: ref, id: r.ID(), slot: slot}
		c.setSlot(e, r)
		c.exports[e.id] = e
		// A cut that ran before the export was listed missed it: check.
		if st := stateOf(c.b.reg.RemoteErr(r)); st != stAlive {
			delete(c.exports, e.id)
			c.cutExport(e, st)
			c.rejected++
			rep.code = uint32(backend.RemoteCode(stateErr(st)))
			return rep, -1, nil
		}
		rep.slot = slot
	}
	rep.off, rep.len, rep.access = off, uint64(r.Len()), r.Access()
	passed = true
	if dev != nil {
		dev.slot, dev.len, dev.access = rep.slot, rep.len, rep.access
	}
	return rep, fd, dev
}

// takeSlot returns a free slot of the table. c.mu is held.
func (c *serverConn) takeSlot() (uint32, bool) {
	if n := len(c.free); n > 0 {
		s := c.free[n-1]
		c.free = c.free[:n-1]
		return s, true
	}
	if c.next == 0 {
		c.next = 1
	}
	if c.next >= tableSlots {
		return 0, false
	}
	c.next++
	return c.next - 1, true
}

// setSlot publishes e's region in its slot: id and lease first, then the
// state that lets copies in. c.mu is held.
func (c *serverConn) setSlot(e *export, r *memreg.Region) {
	t := c.table
	t.word(e.slot, wID).Store(e.id)
	var l uint64
	if left, ok := c.b.reg.LeaseLeft(r); ok {
		l = uint64(nanotime()) + uint64(left)
	}
	t.word(e.slot, wLease).Store(l)
	t.word(e.slot, wState).Store(stAlive)
}

// cutRegion is Backend.cutRegion for this connection.
func (c *serverConn) cutRegion(r *memreg.Region) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.exports[r.ID()]
	if e == nil || e.ref.Region() != r || c.table == nil {
		return
	}
	st := stateOf(c.b.reg.RemoteErr(r))
	if st == stAlive { // the lease was set again
		var l uint64
		if left, ok := c.b.reg.LeaseLeft(r); ok {
			l = uint64(nanotime()) + uint64(left)
		}
		c.table.word(e.slot, wLease).Store(l)
		return
	}
	delete(c.exports, e.id)
	c.cutExport(e, st)
}

// unmap is the peer's word that it no longer maps a region.
func (c *serverConn) unmap(slot uint32, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.exports[id]; e != nil && e.slot == slot {
		delete(c.exports, id)
		c.cutExport(e, stReleased)
	}
}

// cutExport closes e's slot with state st and, once the peer's copies in
// it are drained, releases e's reference, gives the slot back and tells
// the peer (msgGone) so it unmaps. c.mu is held; e is no longer listed.
func (c *serverConn) cutExport(e *export, st uint64) {
	c.table.word(e.slot, wState).Store(st)
	c.drains.Add(1)
	go c.drain(e)
}

func (c *serverConn) drain(e *export) {
	defer c.drains.Done()
	if c.agent {
		// The cut notice, before the wait: the agent revokes its proxy of
		// the region, which ends its users at once. Never blocking (an
		// agent that does not read loses it, and is waited for as before).
		_ = tryWritePacket(c.conn, slotMsg(msgCut, e.slot, e.id))
	}
	n := c.table.word(e.slot, wInFlight)
	d := 20 * time.Microsecond
	start := time.Now()
	for n.Load() != 0 {
		select {
		case <-c.dead:
			if time.Since(c.deadAt) > drainBound {
				c.giveUp(e, "connection ended")
				return // the slot dies with the table
			}
		default:
		}
		if time.Since(start) > stuckBound {
			c.giveUp(e, "copy stuck in flight")
			c.conn.Close() // the serving goroutine tears the rest down
			return
		}
		time.Sleep(d)
		d = min(2*d, 2*time.Millisecond)
	}
	e.ref.Release()
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.dead:
		return
	default:
	}
	c.free = append(c.free, e.slot)
	_ = writePacket(c.conn, slotMsg(msgGone, e.slot, e.id), -1) // best effort: the peer also finds it on use
}

// giveUp lets e's region go while the peer still counts a copy in it: the
// region is quarantined first, so its memory, which the peer may still
// write, never becomes another buffer's.
func (c *serverConn) giveUp(e *export, why string) {
	e.ref.Region().Quarantine()
	e.ref.Release()
	if ok, dropped := c.b.logs.ended.Allow(); ok {
		c.b.log.Warn("shm peer still copies in a region cut: its route ends, the region is quarantined",
			"peer", fmt.Sprintf("%016x", c.peerID), "region", e.id, "why", why, "suppressed", dropped)
	}
}

// served returns the counters of this connection.
func (c *serverConn) served() backend.ServedStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := backend.ServedStats{Rejected: c.rejected}
	if t := c.table; t != nil {
		s.Ops = t.word(0, wOps).Load()
		s.BytesIn = t.word(0, wBytesIn).Load()
		s.BytesOut = t.word(0, wBytesOut).Load()
		s.Rejected += t.word(0, wRejected).Load()
	}
	return s
}

// stateOf maps a registry's RemoteErr to a slot state.
func stateOf(err error) uint64 {
	switch {
	case err == nil:
		return stAlive
	case errors.Is(err, rdmamgr.ErrRevoked):
		return stRevoked
	case errors.Is(err, rdmamgr.ErrExpired):
		return stExpired
	}
	return stReleased
}

// stateErr is the error of a copy refused by a slot in state st.
func stateErr(st uint64) error {
	switch st {
	case stRevoked:
		return rdmamgr.ErrRevoked
	case stExpired:
		return rdmamgr.ErrExpired
	}
	return rdmamgr.ErrReleased
}
