//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/node"
)

const wait = 20 * time.Second

func startAgent(t *testing.T, sock, host string) *node.Node {
	t.Helper()
	n, err := node.Start(context.Background(), node.Config{HostAgent: node.HostAgent{Socket: sock, HostID: host}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// A real agent stops under its processes and comes back: operations
// through it complete, are cancelled by it (ErrClosed) or fail with
// ErrPeerGone ("host agent gone"),
// the route ends, and the process re-attaches to the new agent at the
// same socket without restarting; a new route through it moves bytes.
func TestRealAgentRestart(t *testing.T) {
	dir := t.TempDir()
	sa, sb := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	agentA := startAgent(t, sa, "host-a")
	startAgent(t, sb, "host-b")
	a, ra := newProcess(t, backendtest.OwnerA, sa)
	b, rb := newProcess(t, backendtest.OwnerB, sb)
	backendtest.CloseAtCleanup(t, wait, a, ra)
	backendtest.CloseAtCleanup(t, wait, b, rb)
	rt := backendtest.MustConnect(t, wait, a, b, backendtest.OwnerB, backendtest.OwnerA)
	const n = 1 << 20
	ha, la := backendtest.Alloc(t, ra, n, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, rb, n, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	if err := backendtest.Do(t, wait, rt, ra, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("Put before: %v", err)
	}

	// Stop the agent with Puts in flight.
	rec := backendtest.NewRecorder(64)
	var posted int
	for i := range 64 {
		wr, release := backendtest.NewWR(t, ra, backend.OpWrite, backendtest.Slice(t, ha, i*(n/64), n/64), backendtest.Slice(t, hb, i*(n/64), n/64), time.Now().Add(wait), rec)
		t.Cleanup(release)
		if rt.Post(wr) == nil {
			posted++
		}
	}
	agentA.Close()
	for range posted {
		res := rec.Wait(t, wait)
		// Done before, answered by the stopping agent (CLOSED; INTERNAL
		// seen too: an agent-side cancellation without a sentinel), or
		// failed when its socket ended (peer gone).
		var re *backend.RemoteError
		if res.Err != nil && !errors.Is(res.Err, rdmamgr.ErrPeerGone) && !errors.As(res.Err, &re) {
			t.Fatalf("in flight when the agent stopped: %v", res.Err)
		}
	}
	select {
	case <-rt.Done():
	case <-time.After(wait):
		t.Fatal("route up after its agent stopped")
	}
	if err := rt.Err(); !errors.Is(err, rdmamgr.ErrPeerGone) || !strings.Contains(err.Error(), "host agent gone") {
		t.Fatalf("route's error: %v", err)
	}

	startAgent(t, sa, "host-a")
	for end := time.Now().Add(wait); strings.HasSuffix(a.Addr(), "(not attached)"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("never re-attached to the restarted agent")
		}
	}
	rt2 := backendtest.MustConnect(t, wait, a, b, backendtest.OwnerB, backendtest.OwnerA)
	backendtest.Random(t, la)
	if err := backendtest.Do(t, wait, rt2, ra, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("Put after the restart: %v", err)
	}
	if !bytes.Equal(la, lb) {
		t.Fatal("Put after the restart: bytes differ")
	}
}
