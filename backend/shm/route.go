//go:build linux

package shm

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
	"github.com/rdmamgr/rdmamgr/internal/refgate"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// route is the initiator's side: the owner's socket (map requests), the
// state table, the mapped regions, a copier for large copies, and the
// fallback route for regions that are not memfd-backed.
type route struct {
	b      *Backend
	peerID uint64
	conn   *net.UnixConn
	table  *table
	fb     backend.Route // nil without a fallback
	cache  *mapCache
	st     routestate.State
	// gate counts the copier's runs and the cache's entries (each holds one
	// ticket until its last reference goes, and a copy holds a reference):
	// Close unmaps the state table only once it drained.
	gate      refgate.Gate
	room      chan struct{} // one token per queued operation (MaxInFlight)
	wake      chan struct{} // cap 1: the copier has work
	poke      chan struct{} // cap 1: the copier's current operation was cancelled
	stop      chan struct{} // closed by Close
	wg        sync.WaitGroup
	closeOnce sync.Once

	mu sync.Mutex // guards the fields below
	// queue holds operations for the copier; cur is the one it runs.
	queue []*backend.WorkRequest
	cur   *backend.WorkRequest
	// replies waits for the owner's answer to map request req.
	replies map[uint64]chan mapReply
	nextReq uint64
	// proxies are the gates MapProxy handed out and not yet closed, by
	// region id.
	proxies map[uint64][]*proxyGate
	// onCut is OnCut's function (nil: cut notices are ignored).
	onCut func(region uint64)

	// devs holds the devices the route opened peers' device regions on
	// (device.go), guarded by devMu; ipcOpens counts the opens.
	devMu    sync.Mutex
	devs     map[int]*routeDev
	ipcOpens atomic.Uint64
	// inner is the copier's operation on the fallback for a chunk of a
	// device-local one (devlocal.go), innerDone its completion.
	inner     *backend.WorkRequest
	innerDone innerDone
}

// mapReply is a msgMapped with its fd (-1: none), owned by the receiver,
// or a msgMappedDevice (dev; m.code OK).
type mapReply struct {
	m   mappedMsg
	fd  int
	dev *mappedDeviceMsg
}

func newRoute(b *Backend, peerID uint64, conn *net.UnixConn, tbl *table, fb backend.Route) *route {
	r := &route{b: b, peerID: peerID, conn: conn, table: tbl, fb: fb,
		room: make(chan struct{}, b.cfg.MaxInFlight), wake: make(chan struct{}, 1), poke: make(chan struct{}, 1),
		stop: make(chan struct{}), replies: make(map[uint64]chan mapReply), proxies: make(map[uint64][]*proxyGate)}
	r.cache = newMapCache(b.cfg.MaxMapped, &r.gate)
	coarseclock.Acquire() // the lease checks' clock; Close gives it back
	tbl.coarse = true
	tbl.refs.Store(1) // the route's hold; proxy gates take more (proxy.go)
	r.st.Init()
	r.wg.Add(2)
	go r.reader()
	go r.copier()
	if fb != nil {
		r.wg.Add(1)
		go r.watchFallback()
	}
	return r
}

// Done implements backend.Route.
func (r *route) Done() <-chan struct{} { return r.st.Done() }

// Err implements backend.Route.
func (r *route) Err() error { return r.st.Err() }

// Stats implements backend.Route: ours and the fallback route's.
func (r *route) Stats() backend.RouteStats {
	s := r.st.Stats()
	if r.fb != nil {
		f := r.fb.Stats()
		s.Ops += f.Ops
		s.BytesPut += f.BytesPut
		s.BytesGot += f.BytesGot
		s.Errors += f.Errors
		s.InFlight += f.InFlight
	}
	return s
}

// fail ends the route with err (the first error wins) and wakes everyone.
func (r *route) fail(err error) {
	if r.st.SetFailed(err) {
		r.conn.Close()
		r.signal()
	}
}

func (r *route) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Close fails queued operations with ErrClosed, waits for the copier, the
// reader and the copies in flight, then unmaps everything. Idempotent.
func (r *route) Close() error {
	r.closeOnce.Do(func() {
		r.fail(fmt.Errorf("shm: route: %w", rdmamgr.ErrClosed))
		close(r.stop)
		r.wg.Wait()
		r.gate.Close()
		r.cache.close() // the mappings go with their last copies, and then the gate drains
		<-r.gate.Drained()
		r.cache.unpinAll()    // mappings a proxy still holds: before their registrations' contexts go
		r.closeDevices()      // every IPC mapping closed with its entry
		coarseclock.Release() // no copy runs any more
		r.table.release()     // unmapped now, or by the last proxy gate's Close
		if r.fb != nil {
			r.fb.Close()
		}
		r.b.removeRoute(r)
	})
	return nil
}

// reader takes the owner's messages: map replies and regions gone.
func (r *route) reader() {
	defer r.wg.Done()
	defer r.cutProxies() // after fail: see MapProxy
	buf, oob := make([]byte, maxPacket), make([]byte, oobSize)
	for {
		p, err := readPacket(r.conn, buf, oob)
		if err != nil {
			if errors.Is(err, rdmamgr.ErrProtocol) {
				r.fail(err)
			} else {
				r.fail(errOwnerGone)
			}
			r.failReplies()
			return
		}
		if err := r.dispatch(p); err != nil {
			r.fail(err)
			r.failReplies()
			return
		}
	}
}

// dispatch hands one owner message on; it owns p's fd.
func (r *route) dispatch(p packet) error {
	d := newDecoder(p.b)
	switch typ := d.U8(); typ {
	case msgMapped:
		m := decodeMapped(&d)
		if err := d.end(); err != nil {
			p.close()
			return err
		}
		r.mu.Lock() // sent under the lock: forget then finds the reply or none comes
		defer r.mu.Unlock()
		ch := r.replies[m.req]
		delete(r.replies, m.req)
		if ch == nil {
			p.close() // its requester gave up
			return nil
		}
		ch <- mapReply{m: m, fd: p.fd} // capacity 1, one reply per request
		return nil
	case msgMappedDevice:
		p.close() // no fd travels with it
		m := decodeMappedDevice(&d)
		if err := d.end(); err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		ch := r.replies[m.req]
		delete(r.replies, m.req)
		if ch != nil {
			ch <- mapReply{m: mappedMsg{req: m.req, code: uint32(rdmapb.Code_OK), slot: m.slot}, fd: -1, dev: &m}
		}
		return nil
	case msgAck:
		req, code := d.U64(), d.U32()
		p.close()
		if err := d.end(); err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if ch := r.replies[req]; ch != nil {
			delete(r.replies, req)
			ch <- mapReply{m: mappedMsg{req: req, code: code}, fd: -1}
		}
		return nil
	case msgGone:
		slot, id := d.U32(), d.U64()
		p.close()
		if err := d.end(); err != nil {
			return err
		}
		r.cache.dropID(id, slot)
		return nil
	case msgCut:
		slot, id := d.U32(), d.U64()
		p.close()
		if err := d.end(); err != nil {
			return err
		}
		r.cutNotice(slot, id)
		return nil
	default:
		p.close()
		return fmt.Errorf("shm: owner sent message type %d: %w", typ, rdmamgr.ErrProtocol)
	}
}

// failReplies wakes map requests waiting for a connection that ended.
func (r *route) failReplies() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for req, ch := range r.replies {
		delete(r.replies, req)
		close(ch)
	}
}

// watchFallback fails the route when its fallback route fails.
func (r *route) watchFallback() {
	defer r.wg.Done()
	select {
	case <-r.fb.Done():
		r.fail(fmt.Errorf("shm: fallback route: %w", r.fb.Err()))
	case <-r.stop:
	}
}
