//go:build linux

package agent

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// each runs f on every attach socket of the fake agent.
func (a *fakeAgent) each(f func(c *net.UnixConn)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.conns {
		f(c)
	}
}

// unlessStubborn is a held operation's cancel: none (nil) when the agent
// is stubborn. Called with a.mu held.
func (a *fakeAgent) unlessStubborn(cancel chan struct{}) chan struct{} {
	if a.stubborn {
		return nil
	}
	return cancel
}

// The agent says gone (it is stopping) with operations in flight: it still
// runs them, answers them and closes its socket only then (the real agent's
// Close: gone, then its operations cancelled and answered, then the close).
// Until the socket ends nothing is reported: an operation reported "host
// agent gone" while the agent may still copy into its memory would break
// "reported means finished". The answers sent after gone are the outcome.
func TestGoneWaitsForTheAgent(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	x.a.holdOps()
	x.a.mu.Lock()
	x.a.stubborn = true // it answers at release, whatever we do meanwhile
	x.a.mu.Unlock()
	wrs, rec := putWRs(t, x, 2)
	for _, wr := range wrs {
		if err := r.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	x.a.waitPosted(t, len(wrs))
	x.a.each(func(c *net.UnixConn) {
		g := agentwire.Gone{Code: uint32(backend.Code(rdmamgr.ErrClosed)), Reason: "host agent stopping"}
		p, _ := g.Encode()
		if err := agentwire.WritePacket(c, p); err != nil {
			t.Error(err)
		}
	})
	time.Sleep(100 * time.Millisecond)
	rec.None(t) // the agent still runs them
	if err := r.Post(wrs[0]); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("Post once the agent said gone: %v", err)
	}
	x.a.release()
	for range wrs {
		if res := rec.Wait(t, wait); res.Err != nil {
			t.Fatalf("answered after gone: %v", res.Err)
		}
	}
	x.a.kill()
	select {
	case <-r.Done():
	case <-time.After(wait):
		t.Fatal("route up after its agent went")
	}
}

// The agent shuts its read side (it started ending this process: the real
// agent's end) while an operation of ours runs there: our next write fails
// (EPIPE). That is no sign the agent is done with our memory: the operation
// in flight is reported only with the agent's answer, and the one it never
// got once the socket ended.
func TestWriteFailWaitsForTheAgent(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	x.a.holdOps()
	x.a.mu.Lock()
	x.a.stubborn = true
	x.a.mu.Unlock()
	wrs, rec := putWRs(t, x, 2)
	if err := r.Post(wrs[0]); err != nil {
		t.Fatal(err)
	}
	x.a.waitPosted(t, 1)
	x.a.each(func(c *net.UnixConn) { c.CloseRead() })
	time.Sleep(50 * time.Millisecond)
	if err := r.Post(wrs[1]); err != nil && !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case res := <-rec.Results():
		if res.WR == wrs[0] {
			t.Fatalf("the operation the agent still runs was reported: %v", res.Err)
		}
		if !errors.Is(res.Err, rdmamgr.ErrPeerGone) {
			t.Fatalf("the post the agent never read: %v", res.Err)
		}
	default:
	}
	x.a.release()
	var got bool
	for end := time.After(wait); !got; {
		select {
		case res := <-rec.Results():
			if res.WR == wrs[0] {
				got = true
				if res.Err != nil {
					t.Fatalf("answered by the agent: %v", res.Err)
				}
			}
		case <-end:
			t.Fatal("never reported")
		}
	}
}
