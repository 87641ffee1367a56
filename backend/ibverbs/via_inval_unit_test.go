//go:build ibverbs

package ibverbs

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The invalidation's bookkeeping, without a device (go test -tags
// ibverbs -run TestInval ./backend/ibverbs/): acks queue in the route's
// backlog (its ack cells are taken) instead of being posted.

func unitRoute(accepted bool) *route {
	r := newUnitRoute(accepted)
	r.ackBusy = ctlReserve // acks wait in the backlog: nothing is posted
	return r
}

func newUnitRoute(accepted bool) *route {
	r := &route{b: &Backend{log: slog.New(slog.DiscardHandler)}, qp: &queuePair{}, accepted: accepted}
	r.State = routestate.State{}
	r.Init()
	if accepted {
		r.invalTok = make(chan struct{}, maxInvalidates)
		r.invals = make(map[uint32]*invalWait)
	} else {
		r.viaCache = make(map[viaKey]*viaEntry)
		r.viaLive = make(map[*viaEntry]struct{})
	}
	return r
}

// cache puts a resolution of proxy into r's cache.
func cache(r *route, region, proxy uint64) *viaEntry {
	e := &viaEntry{k: viaKey{via: 7, region: region}, res: viaRes{proxy: proxy, access: accessAll, length: 4096}, cached: true}
	r.viaCache[e.k] = e
	r.viaLive[e] = struct{}{}
	return e
}

// TestInvalInitiator: an invalidate drops every resolution of its proxy
// and is acked only once the operations holding them have ended; a post
// that held one before gets the revoke's sentinel; an invalidate naming
// an unknown proxy is acked at once and changes nothing; more than
// maxInvalidates unacked fail the route (ErrProtocol).
func TestInvalInitiator(t *testing.T) {
	r := unitRoute(false)
	e1, e2 := cache(r, 1, 100), cache(r, 2, 100)
	other := cache(r, 3, 200)
	e1.users = 2 // two ops on its rkey
	m := ctlMsg{kind: ctlInvalidate, seq: 5, imm: uint32(rdmapb.Code_REVOKED), region: 100}
	if err := r.invalidatedLocked(m); err != nil {
		t.Fatal(err)
	}
	if len(r.backlog) != 0 {
		t.Fatalf("acked with operations in flight: %+v", r.backlog)
	}
	if _, ok := r.viaCache[e1.k]; ok || e2.cached || !other.cached || r.viaCache[other.k] != other {
		t.Fatalf("cache after the invalidate: %v", r.viaCache)
	}
	if _, ok := r.viaLive[e2]; ok {
		t.Fatal("an unheld invalidated entry is still live")
	}
	r.viaMu.Lock()
	err := r.holdLocked(e1)
	r.viaMu.Unlock()
	if !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("holding an invalidated resolution: %v, want ErrRevoked", err)
	}
	r.viaRelease(e1)
	if len(r.backlog) != 0 {
		t.Fatal("acked with an operation in flight")
	}
	r.viaRelease(e1)
	if len(r.backlog) != 1 || r.backlog[0] != (ackMsg{kind: ctlInvalAck, seq: 5, proxy: 100}) {
		t.Fatalf("backlog %+v, want the ack of invalidate 5", r.backlog)
	}
	if _, ok := r.viaLive[e1]; ok || r.invalPend != 0 {
		t.Fatalf("entry still live (%v) or %d invalidates pending", ok, r.invalPend)
	}

	// Unknown proxy: acked at once, nothing dropped.
	if err := r.invalidatedLocked(ctlMsg{kind: ctlInvalidate, seq: 6, imm: uint32(rdmapb.Code_RELEASED), region: 999}); err != nil {
		t.Fatal(err)
	}
	if len(r.backlog) != 2 || r.backlog[1].seq != 6 || !other.cached {
		t.Fatalf("backlog %+v after an unknown invalidate", r.backlog)
	}
	// A third unacked one is still within the bound; a fourth is not.
	if err := r.invalidatedLocked(ctlMsg{kind: ctlInvalidate, seq: 7, imm: uint32(rdmapb.Code_RELEASED), region: 998}); err != nil {
		t.Fatal(err)
	}
	if err := r.invalidatedLocked(ctlMsg{kind: ctlInvalidate, seq: 8, imm: uint32(rdmapb.Code_RELEASED), region: 997}); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("a fourth unacked invalidate: %v, want ErrProtocol", err)
	}
}

// TestInvalOwner: an ack wakes the invalidate it names and gives back
// its room; an ack of nothing asked, or naming another proxy, is ignored.
func TestInvalOwner(t *testing.T) {
	r := unitRoute(true)
	w := &invalWait{proxy: 100, done: make(chan struct{})}
	r.invals[3] = w
	r.invalTok <- struct{}{}
	for _, m := range []ctlMsg{{kind: ctlInvalAck, seq: 4, region: 100}, {kind: ctlInvalAck, seq: 3, region: 101}} {
		r.invalAckedLocked(m)
		select {
		case <-w.done:
			t.Fatalf("ack %+v woke invalidate 3 of proxy 100", m)
		default:
		}
	}
	if len(r.invalTok) != 1 || len(r.invals) != 1 {
		t.Fatal("an ignored ack changed the route's invalidates")
	}
	r.invalAckedLocked(ctlMsg{kind: ctlInvalAck, seq: 3, region: 100})
	select {
	case <-w.done:
	default:
		t.Fatal("the ack did not wake its invalidate")
	}
	if len(r.invalTok) != 0 || len(r.invals) != 0 {
		t.Fatal("the acked invalidate still holds its room")
	}
	r.invalAckedLocked(ctlMsg{kind: ctlInvalAck, seq: 3, region: 100}) // again: ignored, no panic
}
