package tcp

import (
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

var fastBeat = Config{HeartbeatInterval: 20 * time.Millisecond, PeerTimeout: 150 * time.Millisecond, ConnsPerRoute: 1}

// An idle route to a live peer stays up: its pings are answered.
func TestHeartbeatKeepsIdleRouteUp(t *testing.T) {
	p := newPair(t, fastBeat, Config{})
	deadline := time.After(10 * fastBeat.PeerTimeout)
	pings := 0
	for pings < 3 {
		select {
		case <-p.route.Done():
			t.Fatalf("idle route to a live peer failed: %v", p.route.Err())
		case <-deadline:
			t.Fatalf("only %d pings answered", pings)
		case <-time.After(fastBeat.HeartbeatInterval):
		}
		pings = int(p.route.(*route).conns[0].heard.Load())
	}
	p.checkServes(t)
}

// A peer that accepts the connection and then goes silent (a hung host)
// is detected: the route fails with ErrPeerGone and in-flight work fails
// with it, without waiting for the work's own deadline.
func TestHeartbeatDetectsSilentPeer(t *testing.T) {
	a, regA := newBackend(t, fastBeat, backendtest.OwnerA)
	f := newFakeServer(t)
	rt := f.connect(t, a)
	sc := f.accept(t)
	_ = sc // never answers anything
	local, _ := backendtest.Alloc(t, regA, 4096, 0)
	mem, _ := regA.Bytes(local)
	rec := backendtest.NewRecorder(1)
	wr := &backend.WorkRequest{Op: backend.OpRead, Local: mem, Remote: fakeRemote(4096),
		Deadline: time.Now().Add(time.Hour), Done: rec}
	if err := rt.Post(wr); err != nil {
		t.Fatal(err)
	}
	res := rec.Wait(t, waitTimeout)
	if !errors.Is(res.Err, rdmamgr.ErrPeerGone) {
		t.Fatalf("in-flight read on a silent peer: %v, want ErrPeerGone", res.Err)
	}
	select {
	case <-rt.Done():
	default:
		t.Fatal("route still up")
	}
	if !errors.Is(rt.Err(), rdmamgr.ErrPeerGone) {
		t.Fatalf("route error %v, want ErrPeerGone", rt.Err())
	}
}

// An idle silent peer is detected too (no work in flight).
func TestHeartbeatDetectsSilentIdlePeer(t *testing.T) {
	a, _ := newBackend(t, fastBeat, backendtest.OwnerA)
	f := newFakeServer(t)
	rt := f.connect(t, a)
	f.accept(t)
	select {
	case <-rt.Done():
	case <-time.After(waitTimeout):
		t.Fatal("silent idle peer not detected")
	}
	if !errors.Is(rt.Err(), rdmamgr.ErrPeerGone) {
		t.Fatalf("route error %v, want ErrPeerGone", rt.Err())
	}
}
