//go:build linux

package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// posted waits until the agent received n posts.
func (a *fakeAgent) waitPosted(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-a.posted:
		case <-time.After(wait):
			t.Fatal("the agent never got the post")
		}
	}
}

// putWRs returns n Puts of 64 bytes from p1 to p2 and their recorder.
func putWRs(t *testing.T, x *pair, n int) ([]*backend.WorkRequest, *backendtest.Recorder) {
	src, _ := backendtest.Alloc(t, x.p1.reg, 64*n, buffer.AccessReadWrite)
	dst, _ := backendtest.Alloc(t, x.p2.reg, 64*n, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(n)
	var wrs []*backend.WorkRequest
	for i := range n {
		wr, release := backendtest.NewWR(t, x.p1.reg, backend.OpWrite, backendtest.Slice(t, src, i*64, 64), backendtest.Slice(t, dst, i*64, 64), time.Time{}, rec)
		t.Cleanup(release)
		wrs = append(wrs, wr)
	}
	return wrs, rec
}

// The agent dies with operations in flight: each fails with ErrPeerGone
// ("host agent gone"), the route ends and refuses new posts; the process
// re-attaches to the restarted agent without restarting, and a new route
// works.
func TestAgentGoneAndBack(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	x.a.holdOps()
	wrs, rec := putWRs(t, x, 8)
	for _, wr := range wrs {
		if err := r.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	x.a.waitPosted(t, len(wrs))
	rec.None(t)
	x.a.kill()
	for range wrs {
		res := rec.Wait(t, wait)
		if !errors.Is(res.Err, rdmamgr.ErrPeerGone) || !strings.Contains(res.Err.Error(), "host agent gone") {
			t.Fatalf("in flight when the agent died: %v", res.Err)
		}
	}
	select {
	case <-r.Done():
	case <-time.After(wait):
		t.Fatal("route still up after its agent died")
	}
	if err := r.Post(wrs[0]); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("Post on a dead route: %v", err)
	}
	// Not attached now: routes go elsewhere.
	for end := time.Now().Add(wait); x.p1.b.current() != nil; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("still attached to a dead agent")
		}
	}
	if _, _, err := x.p1.b.PrepareRoute(t.Context(), 0); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("PrepareRoute while the agent is gone: %v", err)
	}
	x.a = startFake(t, x.w, x.a.path, "agent-a:1", 1, backend.Secret{}) // the restart
	x.p1.waitAttached(t)
	r2 := x.route(t)
	wrs, rec = putWRs(t, x, 2)
	for _, wr := range wrs {
		if err := r2.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	for range wrs {
		if res := rec.Wait(t, wait); res.Err != nil {
			t.Fatalf("after re-attach: %v", res.Err)
		}
	}
}

// Cancel ends one held operation with its cause; its neighbours complete
// normally once the agent runs them. Close cancels the rest with ErrClosed
// and returns once the agent answered.
func TestCancelAndClose(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	x.a.holdOps()
	wrs, rec := putWRs(t, x, 4)
	for _, wr := range wrs {
		if err := r.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	x.a.waitPosted(t, len(wrs))
	cause := errors.New("my cause")
	wrs[1].RequestCancel(cause)
	r.Cancel(wrs[1])
	res := rec.Wait(t, wait)
	if res.WR != wrs[1] || !errors.Is(res.Err, cause) {
		t.Fatalf("cancelled: %p %v", res.WR, res.Err)
	}
	rec.None(t)
	r.Cancel(wrs[1]) // completed: ignored
	x.a.release()
	for range 3 {
		if res := rec.Wait(t, wait); res.Err != nil || res.WR == wrs[1] {
			t.Fatalf("neighbour: %v", res.Err)
		}
	}

	x.a.holdOps()
	wrs, rec = putWRs(t, x, 3)
	for _, wr := range wrs {
		if err := r.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	x.a.waitPosted(t, len(wrs))
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	for range wrs {
		if res := rec.Wait(t, wait); !errors.Is(res.Err, rdmamgr.ErrClosed) {
			t.Fatalf("in flight at Close: %v", res.Err)
		}
	}
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("Close did not return")
	}
	if r.Stats().InFlight != 0 {
		t.Fatal("in flight after Close")
	}
	if err := r.Post(wrs[0]); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("Post after Close: %v", err)
	}
	r.Close() // idempotent
}

// A PEER_GONE done (the target left its agent) ends the route so the
// manager sets up a new one; another route on the attachment is fine.
func TestTargetGoneEndsRoute(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	other := x.route(t)
	x.a.mu.Lock()
	x.b.mu.Lock()
	delete(x.b.slots, 1) // p2 left agent b (as the fake sees it)
	x.b.mu.Unlock()
	x.a.mu.Unlock()
	wrs, rec := putWRs(t, x, 1)
	if err := r.Post(wrs[0]); err != nil {
		t.Fatal(err)
	}
	if res := rec.Wait(t, wait); !errors.Is(res.Err, rdmamgr.ErrPeerGone) {
		t.Fatalf("to a gone target: %v", res.Err)
	}
	if !routeDone(r) || !errors.Is(r.Err(), rdmamgr.ErrPeerGone) {
		t.Fatalf("route after its target went: %v", r.Err())
	}
	if routeDone(other) {
		t.Fatal("the other route ended too")
	}
}

// A hostile or broken agent: a done for an operation not in flight, a
// malformed done, an unexpected message, or gone: the attachment ends, what
// is in flight fails with ErrPeerGone, and the process re-attaches.
func TestHostileAgent(t *testing.T) {
	for name, pkt := range map[string]func(p []byte) []byte{
		"unknown wrid": func(p []byte) []byte {
			var b agentwire.Batch
			b.Start(agentwire.TypeDone)
			b.AddDone(agentwire.Done{WRID: 1 << 60})
			return b.Packet()
		},
		"malformed done": func(p []byte) []byte { return append(append([]byte(nil), p...), 1) },
		"unknown code":   func(p []byte) []byte { q := append([]byte(nil), p...); q[3+8] = 200; return q },
		"a post":         func(p []byte) []byte { q := append([]byte(nil), p...); q[0] = agentwire.TypePost; return q },
		"gone": func(p []byte) []byte {
			g := agentwire.Gone{Code: uint32(rdmapb.Code_CLOSED), Reason: "stopping"}
			q, _ := g.Encode()
			return q
		},
	} {
		t.Run(name, func(t *testing.T) {
			x := newPair(t)
			r := x.route(t)
			before := x.p1.b.current()
			x.a.mu.Lock()
			x.a.mangle = pkt
			x.a.mu.Unlock()
			wrs, rec := putWRs(t, x, 1)
			if err := r.Post(wrs[0]); err != nil {
				t.Fatal(err)
			}
			res := rec.Wait(t, wait)
			if !errors.Is(res.Err, rdmamgr.ErrPeerGone) {
				t.Fatalf("op: %v", res.Err)
			}
			if name == "gone" && !strings.Contains(res.Err.Error(), "stopping") {
				t.Fatalf("gone's reason lost: %v", res.Err)
			}
			if !routeDone(r) {
				t.Fatal("route up on a broken attachment")
			}
			for end := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
				if a := x.p1.b.current(); a != nil && a != before {
					break
				}
				if time.Now().After(end) {
					t.Fatal("never re-attached")
				}
			}
		})
	}
}

// Attaching is refused without the deployment's secret (the agent checks
// the MAC) and the process keeps working direct; with it, it attaches.
func TestAttachAuth(t *testing.T) {
	w := newWorld()
	secret, _ := backend.NewSecret([]byte("0123456789abcdef"))
	other, _ := backend.NewSecret([]byte("fedcba9876543210"))
	s := sockPath(t, "s.sock")
	startFake(t, w, s, "agent-s:1", 1, secret)
	bad := newProc(t, w, 0x6666, s, other, nil)
	time.Sleep(100 * time.Millisecond) // a few retries
	if bad.b.current() != nil {
		t.Fatal("attached with the wrong secret")
	}
	good := newProc(t, w, 0x7777, s, secret, nil)
	good.waitAttached(t)
}
