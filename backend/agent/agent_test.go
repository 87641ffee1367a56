//go:build linux

package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

const wait = 10 * time.Second

// pair is two processes on two hosts, each attached to its fake agent.
type pair struct {
	w      *world
	a, b   *fakeAgent
	p1, p2 *proc
}

func newPair(t *testing.T) *pair {
	t.Helper()
	w := newWorld()
	sa, sb := sockPath(t, "a.sock"), sockPath(t, "b.sock")
	x := &pair{w: w}
	x.a = startFake(t, w, sa, "agent-a:1", 1, backend.Secret{})
	x.b = startFake(t, w, sb, "agent-b:1", 2, backend.Secret{})
	x.p1 = newProc(t, w, 0x1111, sa, backend.Secret{}, nil)
	x.p2 = newProc(t, w, 0x2222, sb, backend.Secret{}, nil)
	x.p1.waitAttached(t)
	x.p2.waitAttached(t)
	return x
}

func (x *pair) route(t *testing.T) backend.Route {
	t.Helper()
	r, err := routeTo(t, x.p1, x.p2)
	if err != nil {
		t.Fatalf("route: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// Put, Get, FetchAdd and CompareAndSwap go through the agents (every byte
// checked), a chain through PostList too; the route says it goes via the
// host agent and counts what it moved.
func TestThroughAgents(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	if v := r.(*route).Via(); !strings.Contains(v, "via host agent") || !strings.Contains(v, "agent-b:1") {
		t.Fatalf("Via() = %q", v)
	}
	const n = 4096
	src, smem := backendtest.Alloc(t, x.p1.reg, n, buffer.AccessReadWrite)
	dst, dmem := backendtest.Alloc(t, x.p2.reg, n, buffer.AccessReadWrite|buffer.AccessAtomic)
	back, bmem := backendtest.Alloc(t, x.p1.reg, n, buffer.AccessReadWrite)
	backendtest.Random(t, smem)
	if err := backendtest.Do(t, wait, r, x.p1.reg, backend.OpWrite, backendtest.Slice(t, src, 100, 1000), backendtest.Slice(t, dst, 7, 1000)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if !bytes.Equal(dmem[7:1007], smem[100:1100]) {
		t.Fatal("Put: bytes differ")
	}
	if err := backendtest.Do(t, wait, r, x.p1.reg, backend.OpRead, back, dst); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !bytes.Equal(bmem, dmem) {
		t.Fatal("Get: bytes differ")
	}

	word := backendtest.Slice(t, dst, 8, 8)
	binary.LittleEndian.PutUint64(dmem[8:], 40)
	rec := backendtest.NewRecorder(4)
	fa := &backend.WorkRequest{Op: backend.OpFetchAdd, Remote: word, Swap: 2, Done: rec}
	if err := r.Post(fa); err != nil {
		t.Fatal(err)
	}
	if res := rec.Wait(t, wait); res.Err != nil || fa.Result != 40 || binary.LittleEndian.Uint64(dmem[8:]) != 42 {
		t.Fatalf("FetchAdd: %v, old %d, now %d", res.Err, fa.Result, binary.LittleEndian.Uint64(dmem[8:]))
	}
	cs := &backend.WorkRequest{Op: backend.OpCompareSwap, Remote: word, Compare: 42, Swap: 7, Done: rec}
	if err := r.Post(cs); err != nil {
		t.Fatal(err)
	}
	if res := rec.Wait(t, wait); res.Err != nil || cs.Result != 42 || binary.LittleEndian.Uint64(dmem[8:]) != 7 {
		t.Fatalf("CompareAndSwap: %v, old %d", res.Err, cs.Result)
	}

	// A chain of 64 Puts in one PostList, each to its own slice.
	backendtest.Random(t, smem)
	lp := r.(backend.ListPoster)
	rec = backendtest.NewRecorder(64)
	var wrs []*backend.WorkRequest
	for i := range 64 {
		wr, release := backendtest.NewWR(t, x.p1.reg, backend.OpWrite, backendtest.Slice(t, src, i*64, 64), backendtest.Slice(t, dst, i*64, 64), time.Time{}, rec)
		defer release()
		wrs = append(wrs, wr)
	}
	for len(x.a.posted) > 0 { // the posts before
		<-x.a.posted
	}
	x.a.mu.Lock()
	packets := x.a.postPackets
	x.a.mu.Unlock()
	if k, err := lp.PostList(wrs); k != 64 || err != nil {
		t.Fatalf("PostList: %d, %v", k, err)
	}
	x.a.waitPosted(t, 64)
	x.a.mu.Lock()
	packets = x.a.postPackets - packets
	x.a.mu.Unlock()
	if packets != 1 {
		t.Fatalf("a chain of 64 in %d packets, want 1", packets)
	}
	for range 64 {
		if res := rec.Wait(t, wait); res.Err != nil {
			t.Fatalf("chained Put: %v", res.Err)
		}
	}
	if !bytes.Equal(dmem, smem) {
		t.Fatal("chained Puts: bytes differ")
	}
	st := r.Stats()
	if st.Ops != 68 || st.BytesPut != 1000+64*64 || st.BytesGot != n || st.InFlight != 0 || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}

	// The far owner's refusal comes back as its sentinel; the route lives.
	bad := dst
	bad.Key[0] ^= 1
	if err := backendtest.Do(t, wait, r, x.p1.reg, backend.OpWrite, src, bad); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("wrong key: %v", err)
	}
	if routeDone(r) {
		t.Fatal("a refused operation ended the route")
	}
}

func routeDone(r backend.Route) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// Without an agent both ends refuse with ErrNotSupported (the manager then
// tries the next backend); with both on one host the responder refuses;
// hostile route info is ErrProtocol.
func TestRefusals(t *testing.T) {
	w := newWorld()
	none := newProc(t, w, 0x3333, sockPath(t, "nobody.sock"), backend.Secret{}, nil)
	if _, _, err := none.b.PrepareRoute(context.Background(), 0); !errors.Is(err, rdmamgr.ErrNotSupported) || !strings.Contains(err.Error(), "not attached") {
		t.Fatalf("PrepareRoute without an agent: %v", err)
	}
	info := (&routeInfo{host: [agentwire.HostIDSize]byte{9}, slot: 1, agent: "x:1"}).encode()
	if _, err := none.b.AcceptRoute(context.Background(), 1, info); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("AcceptRoute without an agent: %v", err)
	}
	if !strings.Contains(none.b.Addr(), "not attached") {
		t.Fatalf("Addr %q", none.b.Addr())
	}

	s := sockPath(t, "one.sock")
	startFake(t, w, s, "agent-one:1", 1, backend.Secret{})
	p1 := newProc(t, w, 0x4444, s, backend.Secret{}, nil)
	p2 := newProc(t, w, 0x5555, s, backend.Secret{}, nil)
	p1.waitAttached(t)
	p2.waitAttached(t)
	if _, err := routeTo(t, p1, p2); !errors.Is(err, rdmamgr.ErrNotSupported) || !strings.Contains(err.Error(), "on this host") {
		t.Fatalf("same host: %v", err)
	}
	good := (&routeInfo{host: [agentwire.HostIDSize]byte{9}, slot: 1, agent: "x:1"}).encode()
	for name, p := range map[string][]byte{
		"empty": nil, "version": append([]byte{2}, good[1:]...), "truncated": good[:len(good)-1],
		"trailing": append(good, 0), "no slot": (&routeInfo{slot: 0, agent: "x:1"}).encode(),
		"no agent": (&routeInfo{slot: 1}).encode(), "control": (&routeInfo{slot: 1, agent: "x\n"}).encode(),
	} {
		if _, err := p1.b.AcceptRoute(context.Background(), 1, p); !errors.Is(err, rdmamgr.ErrProtocol) && !errors.Is(err, rdmamgr.ErrVersion) {
			t.Errorf("%s info: %v", name, err)
		}
	}
	pr, _, err := p1.b.PrepareRoute(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Complete(context.Background(), []byte{1, 0, 0, 0}); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("hostile answer: %v", err)
	}
}

// The owner of a revoked region may still Put from it and Get into it: the
// agent, which maps it as any peer would, cannot, so the bytes go through
// a bounce region (without it the agent's map is refused: REVOKED).
func TestRevokedLocalBounces(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	const n = 8192
	src, smem := backendtest.Alloc(t, x.p1.reg, n, buffer.AccessReadWrite)
	dst, dmem := backendtest.Alloc(t, x.p2.reg, n, buffer.AccessReadWrite)
	backendtest.Random(t, smem)
	if err := x.p1.reg.Revoke(t.Context(), src); err != nil {
		t.Fatal(err)
	}
	if err := backendtest.Do(t, wait, r, x.p1.reg, backend.OpWrite, src, dst); err != nil {
		t.Fatalf("Put from a revoked region of ours: %v", err)
	}
	if !bytes.Equal(dmem, smem) {
		t.Fatal("Put: bytes differ")
	}
	backendtest.Random(t, dmem)
	if err := backendtest.Do(t, wait, r, x.p1.reg, backend.OpRead, src, dst); err != nil {
		t.Fatalf("Get into a revoked region of ours: %v", err)
	}
	if !bytes.Equal(dmem, smem) {
		t.Fatal("Get: bytes differ")
	}
	// The bounce regions go once released (in the background).
	for end := time.Now().Add(wait); len(x.p1.reg.Regions()) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d regions left, want the revoked one", len(x.p1.reg.Regions()))
		}
	}
}

// A chain longer than the room in flight: the records batched before the
// wait for room are sent, so the chain completes (no deadlock).
func TestPostListPastRoom(t *testing.T) {
	w := newWorld()
	sa, sb := sockPath(t, "a.sock"), sockPath(t, "b.sock")
	x := &pair{w: w}
	x.a = startFake(t, w, sa, "agent-a:1", 1, backend.Secret{})
	x.b = startFake(t, w, sb, "agent-b:1", 2, backend.Secret{})
	x.p1 = newProc(t, w, 0x1111, sa, backend.Secret{}, func(c *Config) { c.MaxInFlight = 4 })
	x.p2 = newProc(t, w, 0x2222, sb, backend.Secret{}, nil)
	x.p1.waitAttached(t)
	x.p2.waitAttached(t)
	r := x.route(t)
	wrs, rec := putWRs(t, x, 32)
	posted := make(chan error, 1)
	go func() {
		k, err := r.(backend.ListPoster).PostList(wrs)
		if err == nil && k != 32 {
			err = errors.New("short chain")
		}
		posted <- err
	}()
	select {
	case err := <-posted:
		if err != nil {
			t.Fatalf("PostList: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("PostList stuck waiting for room its own unsent records hold")
	}
	for range wrs {
		if res := rec.Wait(t, wait); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
}
