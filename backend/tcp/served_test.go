package tcp

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestServedBeforeAnswer: a connection adds up what it serves and
// publishes it once per batch (publishServed), yet a WRITE is in the
// owner's counters, its own and its peer's, by the time its answer
// reaches the initiator. The owner's flush is held past its write until
// the initiator has looked (testHookWritten), so a count published only
// after the write would be missed here every time.
func TestServedBeforeAnswer(t *testing.T) {
	// Heartbeats rare (3 s, against a test of milliseconds): a ping's flush
	// would take the hold meant for a put's.
	p := newPair(t, Config{HeartbeatInterval: 3 * time.Second}, Config{})
	rt := p.newRoute(t)
	hr, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	local := make([]byte, 4096)
	looked := make(chan struct{}, 1)
	var armed atomic.Bool // the next flush is the put's
	hook := func(*serverConn) {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		select {
		case <-looked:
		case <-time.After(waitTimeout / 2): // within the put's own deadline
		}
	}
	testHookWritten.Store(&hook)
	t.Cleanup(func() { testHookWritten.Store(nil) })
	for i := range 20 {
		n := 1 + i*100
		r, err := hr.Slice(0, uint64(n))
		if err != nil {
			t.Fatal(err)
		}
		before := p.b.Served()
		armed.Store(true)
		if err := do(t, rt, backend.OpWrite, local[:n], r); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		sv := p.b.Served()
		var peer backend.PeerServedStats
		for _, ps := range p.b.ServedByPeer() {
			peer = ps
		}
		looked <- struct{}{}
		if sv.Ops != before.Ops+1 || sv.BytesIn != before.BytesIn+uint64(n) {
			t.Fatalf("put %d of %d bytes: served %+v after, %+v before", i, n, sv, before)
		}
		if peer.Ops != sv.Ops || peer.BytesIn != sv.BytesIn {
			t.Fatalf("put %d: the peer's counters %+v, the backend's %+v", i, peer, sv)
		}
	}
}
