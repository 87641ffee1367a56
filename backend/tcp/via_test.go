package tcp

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// Frames for an attached process (via, origin): a server with a resolver
// (a host agent) serves them in the process's memory through a proxy
// region of its own registry; one without refuses them.

const (
	testVia    = 7
	testOrigin = 0x0123456789
)

// agentPair is a pair whose server (b) is a host agent with one attached
// process (fake) holding region procH over procMem.
type agentPair struct {
	*pair
	fake    *fakeAgent
	procH   buffer.Buffer
	procMem []byte
}

// The initiator (a) is an agent too (it has a resolver), so its route's
// frames may name an origin.
func newAgentPair(t testing.TB, cfgA, cfgB Config, n int) *agentPair {
	t.Helper()
	p := &agentPair{pair: &pair{}}
	p.a, p.regA = newBackend(t, cfgA, backendtest.OwnerA)
	p.b, p.regB = newBackend(t, cfgB, backendtest.OwnerB)
	p.fake = newTestFakeAgent(t, p.regB, testVia)
	if !wiring.SetResolver(p.b, p.fake) || !wiring.SetResolver(p.a, newTestFakeAgent(t, p.regA, testVia)) {
		t.Fatal("SetResolver refused a *tcp.Backend")
	}
	p.route = p.newRoute(t)
	var err error
	if p.procH, p.procMem, err = p.fake.region(uint64(n), accessAll); err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, p.procMem)
	return p
}

// viaWR is a work request through the agent to the process.
func viaWR(op backend.Op, local []byte, remote buffer.Buffer) *backend.WorkRequest {
	return &backend.WorkRequest{Op: op, Local: local, Remote: remote, Via: testVia, Deadline: time.Now().Add(waitTimeout)}
}

// TestViaVerbs: Put, Get, PutWithImm (one frame and chunked), Send and
// the atomics through an agent land in (and come from) the process's
// memory; its events and messages reach its inbox naming the origin, and
// the agent's own inbox and memory see nothing.
func TestViaVerbs(t *testing.T) {
	cfg := Config{ChunkSize: 4096, ConnsPerRoute: 2}
	p := newAgentPair(t, cfg, Config{}, 64<<10)
	own := backendtest.NewInbox(p.regB, 4, 4) // the agent's own: must stay empty
	p.b.SetInbox(own)
	t.Cleanup(own.Close)
	_, local := backendtest.Alloc(t, p.regA, 64<<10, buffer.AccessReadWrite)

	// Put then Get of 3 chunks at an offset.
	backendtest.Random(t, local)
	put := viaWR(backend.OpWrite, local[:10000], backendtest.Slice(t, p.procH, 100, 10000))
	if err := backendtest.DoWR(t, waitTimeout, p.route, put); err != nil {
		t.Fatalf("put via: %v", err)
	}
	backendtest.AssertSame(t, "process memory after put", p.procMem[100:10100], local[:10000])
	got := make([]byte, 10000)
	if err := backendtest.DoWR(t, waitTimeout, p.route, viaWR(backend.OpRead, got, backendtest.Slice(t, p.procH, 100, 10000))); err != nil {
		t.Fatalf("get via: %v", err)
	}
	backendtest.AssertSame(t, "get via", got, local[:10000])

	// PutWithImm, one frame and chunked, with and without an origin.
	for _, tc := range []struct {
		off, n int
		origin uint64
		peer   uint64
	}{{0, 64, testOrigin, testOrigin}, {4096, 3*4096 + 5, testOrigin, testOrigin}, {8, 8, 0, backendtest.OwnerA}} {
		backendtest.Random(t, local[:tc.n])
		wr := viaWR(backend.OpWriteImm, local[:tc.n], backendtest.Slice(t, p.procH, tc.off, tc.n))
		wr.Imm, wr.Origin = 0xCAFE, tc.origin
		if err := backendtest.DoWR(t, waitTimeout, p.route, wr); err != nil {
			t.Fatalf("put-with-imm via (%d bytes): %v", tc.n, err)
		}
		backendtest.AssertSame(t, "process memory after put-with-imm", p.procMem[tc.off:tc.off+tc.n], local[:tc.n])
		ev := <-p.fake.inbox.Events()
		want := backend.Event{Peer: tc.peer, Region: p.procH.Region, Offset: uint64(tc.off), Length: uint64(tc.n), Imm: 0xCAFE}
		if ev != want {
			t.Fatalf("event %+v, want %+v", ev, want)
		}
	}

	// Send with an origin lands in the process's posted buffer.
	rb, rmem := backendtest.Alloc(t, p.fake.proc, 4096, buffer.AccessReadWrite)
	if err := p.fake.inbox.Post(rb); err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, local[:300])
	send := viaWR(backend.OpSend, local[:300], buffer.Buffer{})
	send.Imm, send.HasImm, send.Origin = 9, true, testOrigin
	if err := backendtest.DoWR(t, waitTimeout, p.route, send); err != nil {
		t.Fatalf("send via: %v", err)
	}
	m := <-p.fake.inbox.Messages()
	if m.Peer != testOrigin || !m.HasImm || m.Imm != 9 || len(m.Mem) != 300 {
		t.Fatalf("message %+v", m)
	}
	backendtest.AssertSame(t, "message", rmem[:300], local[:300])

	// Atomics on a word of the process's memory.
	word := backendtest.Slice(t, p.procH, 64, 8)
	for i := range 8 {
		p.procMem[64+i] = 0
	}
	fa := viaWR(backend.OpFetchAdd, nil, word)
	fa.Swap = 5
	if err := backendtest.DoWR(t, waitTimeout, p.route, fa); err != nil || fa.Result != 0 {
		t.Fatalf("fetch-add via: old %d, %v", fa.Result, err)
	}
	cas := viaWR(backend.OpCompareSwap, nil, word)
	cas.Compare, cas.Swap = 5, 42
	if err := backendtest.DoWR(t, waitTimeout, p.route, cas); err != nil || cas.Result != 5 {
		t.Fatalf("compare-swap via: old %d, %v", cas.Result, err)
	}
	if p.procMem[64] != 42 {
		t.Fatalf("word after compare-swap: %x", p.procMem[64:72])
	}

	if len(own.Events()) != 0 || len(own.Messages()) != 0 {
		t.Fatalf("the agent's own inbox got %d events, %d messages", len(own.Events()), len(own.Messages()))
	}
	// One resolution per (region, key, access) run, not one per frame.
	if n := p.fake.resolves.Load(); n > 12 {
		t.Fatalf("%d resolves for 9 operations", n)
	}
	if dl := p.fake.lastDeadline(); dl.IsZero() || time.Until(dl) > agentapi.ResolveTimeout {
		t.Fatalf("resolve context deadline %v (in %v), want at most %v", dl, time.Until(dl), agentapi.ResolveTimeout)
	}
	assertUp(t, p.route)
	p.checkServes(t)
}

// TestViaResolveErrors: a resolver's refusal answers that request with its
// code, touches no memory and the connection serves the next request;
// a proxy the agent dropped is resolved again.
func TestViaResolveErrors(t *testing.T) {
	p := newAgentPair(t, Config{ConnsPerRoute: 1}, Config{}, 4096)
	_, local := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	before := bytes.Clone(p.procMem)
	slice := backendtest.Slice(t, p.procH, 0, 256)
	ok := func(what string) {
		t.Helper()
		if err := backendtest.DoWR(t, waitTimeout, p.route, viaWR(backend.OpRead, make([]byte, 256), slice)); err != nil {
			t.Fatalf("%s: the next request: %v", what, err)
		}
	}
	badKey := slice
	badKey.Key[0] ^= 1
	for _, tc := range []struct {
		name string
		wr   func() *backend.WorkRequest
		fail error
		want error
	}{
		{"wrong key put", func() *backend.WorkRequest { return viaWR(backend.OpWrite, local[:256], badKey) }, nil, rdmamgr.ErrBadKey},
		{"wrong key atomic", func() *backend.WorkRequest {
			return viaWR(backend.OpFetchAdd, nil, backendtest.Slice(t, badKey, 0, 8))
		}, nil, rdmamgr.ErrBadKey},
		{"unknown slot put-with-imm", func() *backend.WorkRequest {
			wr := viaWR(backend.OpWriteImm, local[:256], slice)
			wr.Via = testVia + 1
			return wr
		}, nil, rdmamgr.ErrPeerGone},
		{"unknown slot send", func() *backend.WorkRequest {
			wr := viaWR(backend.OpSend, local[:256], buffer.Buffer{})
			wr.Via = testVia + 1
			return wr
		}, nil, rdmamgr.ErrPeerGone},
		{"resolver refuses get", func() *backend.WorkRequest { return viaWR(backend.OpRead, make([]byte, 256), slice) },
			errors.Join(errors.New("fake"), rdmamgr.ErrRevoked), rdmamgr.ErrRevoked},
		{"resolver refuses put", func() *backend.WorkRequest { return viaWR(backend.OpWrite, local[:256], slice) },
			errors.Join(errors.New("fake"), rdmamgr.ErrPeerGone), rdmamgr.ErrPeerGone},
		{"out of range", func() *backend.WorkRequest {
			s := slice
			s.Offset = 4000
			return viaWR(backend.OpWrite, local[:256], s)
		}, nil, rdmamgr.ErrOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fail != nil {
				// The agent stops a process's access by revoking or
				// dropping its proxies (a connection reuses a
				// resolution while the proxy admits the request).
				_ = p.fake.dropProxy(p.procH.Region)
			}
			p.fake.setFail(tc.fail)
			err := backendtest.DoWR(t, waitTimeout, p.route, tc.wr())
			p.fake.setFail(nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			backendtest.AssertSame(t, "process memory", p.procMem, before)
			ok(tc.name)
			assertUp(t, p.route)
		})
	}

	// The agent drops its proxy (unmapped): the next request resolves
	// again and succeeds.
	n := p.fake.resolves.Load()
	if err := p.fake.dropProxy(p.procH.Region); err != nil {
		t.Fatal(err)
	}
	ok("after the proxy was dropped")
	if p.fake.resolves.Load() != n+1 {
		t.Fatalf("resolves %d, want %d", p.fake.resolves.Load(), n+1)
	}
	if p.b.Served().Rejected == 0 {
		t.Fatal("refusals not counted")
	}
}

// TestViaNarrowProxy: an agent whose proxies admit only the access they
// were resolved for: a Put after a Get of the same region resolves again
// (the connection's last resolution does not admit it) and succeeds, and
// a run of Gets resolves once.
func TestViaNarrowProxy(t *testing.T) {
	p := newAgentPair(t, Config{ConnsPerRoute: 1}, Config{}, 4096)
	p.fake.narrow.Store(true)
	_, local := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	slice := backendtest.Slice(t, p.procH, 0, 256)
	for i := range 3 {
		if err := backendtest.DoWR(t, waitTimeout, p.route, viaWR(backend.OpRead, make([]byte, 256), slice)); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
	}
	if n := p.fake.resolves.Load(); n != 1 {
		t.Fatalf("%d resolves for 3 gets, want 1", n)
	}
	if err := backendtest.DoWR(t, waitTimeout, p.route, viaWR(backend.OpWrite, local[:256], slice)); err != nil {
		t.Fatalf("put after gets: %v", err)
	}
	if n := p.fake.resolves.Load(); n != 2 {
		t.Fatalf("%d resolves after the put, want 2", n)
	}
	backendtest.AssertSame(t, "process memory", p.procMem[:256], local[:256])
}

// TestViaRefusedWithoutResolver: a server that is not an agent answers a
// request with a via, or an origin, NOT_SUPPORTED; nothing lands, the
// route stays up; an agent refuses an origin without a via, and one from
// a peer whose route is not an agent's.
func TestViaRefusedWithoutResolver(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 1}, Config{})
	in := backendtest.NewInbox(p.regB, 4, 4)
	p.b.SetInbox(in)
	t.Cleanup(in.Close)
	h, mem := backendtest.Alloc(t, p.regB, 4096, accessAll)
	rb, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	if err := in.Post(rb); err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, mem)
	before := bytes.Clone(mem)
	_, local := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	word := backendtest.Slice(t, h, 8, 8)
	cases := func(via uint16, origin uint64) []*backend.WorkRequest {
		wrs := []*backend.WorkRequest{
			viaWR(backend.OpWriteImm, local[:100], backendtest.Slice(t, h, 0, 100)),
			viaWR(backend.OpSend, local[:100], buffer.Buffer{}),
		}
		if origin == 0 {
			wrs = append(wrs,
				viaWR(backend.OpWrite, local[:100], backendtest.Slice(t, h, 0, 100)),
				viaWR(backend.OpRead, make([]byte, 100), backendtest.Slice(t, h, 0, 100)),
				viaWR(backend.OpFetchAdd, nil, word),
				viaWR(backend.OpCompareSwap, nil, word))
		}
		for _, wr := range wrs {
			wr.Via, wr.Origin = via, origin
		}
		return wrs
	}
	check := func(what string, wrs []*backend.WorkRequest) {
		t.Helper()
		for _, wr := range wrs {
			if err := backendtest.DoWR(t, waitTimeout, p.route, wr); !errors.Is(err, rdmamgr.ErrNotSupported) {
				t.Fatalf("%s: %s: %v, want ErrNotSupported", what, wr.Op, err)
			}
		}
		backendtest.AssertSame(t, what+": memory", mem, before)
		if len(in.Events()) != 0 || len(in.Messages()) != 0 || in.Posted() != 1 {
			t.Fatalf("%s: inbox touched", what)
		}
		assertUp(t, p.route)
	}
	check("via", cases(testVia, 0))
	check("origin", cases(0, testOrigin))
	check("via and origin", cases(testVia, testOrigin))

	// An agent serves its own memory without a via, but an origin
	// needs one.
	fake := newTestFakeAgent(t, p.regB, testVia)
	wiring.SetResolver(p.b, fake)
	check("agent, origin without via", cases(0, testOrigin))
	// nor from a peer that is not an agent (a's routes are not: it has
	// no resolver).
	check("agent, origin from a peer that is not one", cases(testVia, testOrigin))
	if fake.resolves.Load() != 0 || len(fake.inbox.Events()) != 0 || len(fake.inbox.Messages()) != 0 {
		t.Fatal("resolver asked, or the process's inbox reached, for a refused frame")
	}
	// Taken away again: via is refused again.
	wiring.SetResolver(p.b, nil)
	check("resolver removed", cases(testVia, 0))
	p.checkServes(t)
}

// TestViaResolveBounded: a Resolve that waits gets a context that ends
// within agentapi.ResolveTimeout, and when the backend closes: Close does
// not wait for the resolve bound.
func TestViaResolveBounded(t *testing.T) {
	p := newAgentPair(t, Config{ConnsPerRoute: 1}, Config{}, 4096)
	p.fake.block.Store(true)
	rec := backendtest.NewRecorder(1)
	wr := viaWR(backend.OpRead, make([]byte, 64), backendtest.Slice(t, p.procH, 0, 64))
	wr.Done = rec
	if err := p.route.Post(wr); err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	select {
	case ctx = <-p.fake.blocked:
	case <-time.After(waitTimeout):
		t.Fatal("Resolve not called")
	}
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > agentapi.ResolveTimeout {
		t.Fatalf("resolve context deadline %v, %v: want within %v", dl, ok, agentapi.ResolveTimeout)
	}
	closed := make(chan error, 1)
	go func() { closed <- p.b.Close() }()
	select {
	case <-ctx.Done():
	case <-time.After(waitTimeout):
		t.Fatal("Close did not end the Resolve's context")
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if res := rec.Wait(t, waitTimeout); res.Err == nil {
		t.Fatal("get completed without error through a closed agent")
	}
}

// TestViaSteadyStateAllocs: a run of operations through an agent for one
// region allocates nothing per operation on either side (the resolution
// is reused; the resolve context at most once a second).
func TestViaSteadyStateAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count (sync.Pool drops items at random under -race)")
	}
	p := newAgentPair(t, Config{}, Config{}, 4096)
	_, local := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	sig := &signalDone{ch: make(chan struct{}, 1)}
	var wr backend.WorkRequest
	for _, op := range []backend.Op{backend.OpWrite, backend.OpRead, backend.OpFetchAdd} {
		run := func() {
			wr.Reset()
			wr.Op, wr.Via, wr.Remote = op, testVia, backendtest.Slice(t, p.procH, 64, 64)
			if op == backend.OpFetchAdd {
				wr.Remote, wr.Swap = backendtest.Slice(t, p.procH, 8, 8), 1
			} else {
				wr.Local = local[:64]
			}
			wr.Deadline, wr.Done = time.Now().Add(waitTimeout), sig
			if err := p.route.Post(&wr); err != nil {
				t.Fatal(err)
			}
			<-sig.ch
			if sig.err != nil {
				t.Fatal(sig.err)
			}
		}
		for range 100 {
			run()
		}
		if a := testing.AllocsPerRun(500, run); a > 0.05 {
			t.Errorf("%s via: %.2f allocations per operation, want 0", op, a)
		} else {
			t.Logf("%s via: %.3f allocations per operation", op, a)
		}
	}
}
