//go:build ibverbs

package ibverbs

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Operations for an attached process (Via, Origin) between two host
// agents' backends on one device: the far agent (b) has a fake resolver
// over a second registry standing in for the process; the initiating
// agent (a) has one too (so its route says host agent: origins honoured).

const (
	testVia    = 7
	testOrigin = 0x0123456789
	accessAll  = buffer.AccessReadWrite | buffer.AccessNotify | buffer.AccessAtomic
)

// agentPair is two agents' backends and a route from a to b.
type agentPair struct {
	a, b       *Backend
	regA, regB *memreg.Registry
	fake       *fakeAgent // b's
	rt         *route
}

func newAgentPair(t *testing.T, cfgA Config) *agentPair {
	t.Helper()
	requireDevices(t)
	p := &agentPair{}
	p.a, p.regA = started(t, cfgA, backendtest.OwnerA)
	p.b, p.regB = started(t, DefaultConfig(), backendtest.OwnerB)
	newFakeAgent(t, p.a, testVia)
	p.fake = newFakeAgent(t, p.b, testVia)
	p.rt = connect(t, p.a, p.b).(*route)
	if !p.rt.peerAgent || !p.rt.FarIsAgent() {
		t.Fatal("the route to an agent does not say so")
	}
	return p
}

// viaDo posts an operation through the far agent (local nil: an atomic)
// and returns its error.
func (p *agentPair) viaDo(t *testing.T, rt backend.Route, op backend.Op, local, remote buffer.Buffer, mod func(*backend.WorkRequest)) error {
	t.Helper()
	wr := &backend.WorkRequest{Op: op, Remote: remote, Deadline: time.Now().Add(waitTimeout)}
	if local.Length > 0 {
		var release func()
		wr, release = backendtest.NewWR(t, p.regA, op, local, remote, wr.Deadline, nil)
		defer release()
	}
	wr.Via = testVia
	if mod != nil {
		mod(wr)
	}
	return backendtest.DoWR(t, waitTimeout, rt, wr)
}

// TestViaVerbs: Put, Get (several work requests), PutWithImm, Send and
// the atomics through the far agent land in (and come from) the process's
// memory through one resolve of its region; its events and messages reach
// its inbox naming the origin (or the initiating agent without one); the
// agent's own inbox sees nothing; the proxy's registration holds its gate
// once.
func TestViaVerbs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxMessage = 4096 // a 10000-byte Put is 3 work requests
	p := newAgentPair(t, cfg)
	own := newTestInbox(p.regB, 4, 4) // the agent's own: stays empty
	p.b.SetInbox(own)
	hP, memP := p.fake.region(t, 64<<10, accessAll)
	hA, la := backendtest.Alloc(t, p.regA, 64<<10, buffer.AccessReadWrite)

	backendtest.Random(t, la)
	if err := p.viaDo(t, p.rt, backend.OpWrite, backendtest.Slice(t, hA, 0, 10000), backendtest.Slice(t, hP, 100, 10000), nil); err != nil {
		t.Fatalf("put via: %v", err)
	}
	backendtest.AssertSame(t, "process memory after put", memP[100:10100], la[:10000])
	backendtest.Random(t, memP[20000:30000])
	if err := p.viaDo(t, p.rt, backend.OpRead, backendtest.Slice(t, hA, 20000, 10000), backendtest.Slice(t, hP, 20000, 10000), nil); err != nil {
		t.Fatalf("get via: %v", err)
	}
	backendtest.AssertSame(t, "get via", la[20000:30000], memP[20000:30000])
	if g := p.fake.gate(hP.Region); g == nil || g.users.Load() != 1 {
		t.Fatalf("the proxy's gate: %+v, want the device's registration in it once", g)
	}

	for _, tc := range []struct {
		off, n int
		origin uint64
		peer   uint64
	}{{0, 64, testOrigin, testOrigin}, {4096, 3*4096 + 5, testOrigin, testOrigin}, {8, 8, 0, backendtest.OwnerA}} {
		backendtest.Random(t, la[:tc.n])
		err := p.viaDo(t, p.rt, backend.OpWriteImm, backendtest.Slice(t, hA, 0, tc.n), backendtest.Slice(t, hP, tc.off, tc.n),
			func(wr *backend.WorkRequest) { wr.Imm, wr.Origin = 0xCAFE, tc.origin })
		if err != nil {
			t.Fatalf("put-with-imm via (%d bytes): %v", tc.n, err)
		}
		backendtest.AssertSame(t, "process memory after put-with-imm", memP[tc.off:tc.off+tc.n], la[:tc.n])
		want := backend.Event{Peer: tc.peer, Region: hP.Region, Offset: uint64(tc.off), Length: uint64(tc.n), Imm: 0xCAFE}
		select {
		case ev := <-p.fake.inbox.Events():
			if ev != want {
				t.Fatalf("event %+v, want %+v", ev, want)
			}
		case <-time.After(waitTimeout):
			t.Fatal("no event")
		}
	}

	rb, rmem := backendtest.Alloc(t, p.fake.proc, 4096, buffer.AccessReadWrite)
	if err := p.fake.inbox.Post(rb); err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, la[:300])
	err := p.viaDo(t, p.rt, backend.OpSend, backendtest.Slice(t, hA, 0, 300), buffer.Buffer{},
		func(wr *backend.WorkRequest) { wr.Imm, wr.HasImm, wr.Origin = 9, true, testOrigin })
	if err != nil {
		t.Fatalf("send via: %v", err)
	}
	select {
	case m := <-p.fake.inbox.Messages():
		if m.Peer != testOrigin || !m.HasImm || m.Imm != 9 || len(m.Mem) != 300 {
			t.Fatalf("message %+v", m)
		}
		backendtest.AssertSame(t, "message", rmem[:300], la[:300])
	case <-time.After(waitTimeout):
		t.Fatal("no message")
	}

	// The atomics on a word of the process's region.
	binary.NativeEndian.PutUint64(memP[64:], 40)
	wr := &backend.WorkRequest{}
	err = p.viaDo(t, p.rt, backend.OpFetchAdd, buffer.Buffer{}, backendtest.Slice(t, hP, 64, 8),
		func(w *backend.WorkRequest) { w.Swap = 2; wr = w })
	if err != nil || wr.Result != 40 || binary.NativeEndian.Uint64(memP[64:]) != 42 {
		t.Fatalf("fetch-add via: %v, old %d, word %d", err, wr.Result, binary.NativeEndian.Uint64(memP[64:]))
	}
	err = p.viaDo(t, p.rt, backend.OpCompareSwap, buffer.Buffer{}, backendtest.Slice(t, hP, 64, 8),
		func(w *backend.WorkRequest) { w.Compare, w.Swap = 42, 7; wr = w })
	if err != nil || wr.Result != 42 || binary.NativeEndian.Uint64(memP[64:]) != 7 {
		t.Fatalf("compare-swap via: %v, old %d, word %d", err, wr.Result, binary.NativeEndian.Uint64(memP[64:]))
	}

	if n := p.fake.resolves.Load(); n != 1 {
		t.Errorf("%d resolves for one region, want 1 (cached on the route)", n)
	}
	own.noEvent(t)
	if st := p.rt.Stats(); st.Errors != 0 || st.InFlight != 0 {
		t.Errorf("route stats %+v", st)
	}
}

// TestViaRevokeMidUse: the far agent revokes its proxy (the process cut
// its region) while the initiator holds its rkey and no invalidate
// reaches the initiator (the route is not among the proxy's resolvers,
// as for one the far agent gave up on): the next operation fails with
// ErrStaleProxy (wrapping ErrAccess) and takes the route with it (RC);
// on a new route the same operation resolves again and gets the far
// Resolver's answer (ErrRevoked), and that route goes on. With the
// invalidate, see TestViaRevokeSharedRoute.
func TestViaRevokeMidUse(t *testing.T) {
	p := newAgentPair(t, DefaultConfig())
	hP, memP := p.fake.region(t, 8192, accessAll)
	hQ, memQ := p.fake.region(t, 4096, accessAll)
	hA, la := backendtest.Alloc(t, p.regA, 8192, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	if err := p.viaDo(t, p.rt, backend.OpWrite, hA, hP, nil); err != nil {
		t.Fatalf("put via: %v", err)
	}
	backendtest.AssertSame(t, "process memory after put", memP, la)

	p.b.mrMu.Lock()
	for _, rd := range p.b.mrs {
		rd.resolvers = nil
	}
	p.b.mrMu.Unlock()
	p.fake.cut(t, hP.Region, rdmamgr.ErrRevoked)
	before := append([]byte(nil), memP...)
	backendtest.Random(t, la)
	err := p.viaDo(t, p.rt, backend.OpWrite, hA, hP, nil)
	if !errors.Is(err, agentapi.ErrStaleProxy) || !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("put on a revoked proxy's rkey: %v, want ErrStaleProxy and ErrAccess", err)
	}
	backendtest.AssertSame(t, "process memory after the cut", memP, before)
	select {
	case <-p.rt.Done():
	case <-time.After(waitTimeout):
		t.Fatal("the route survived a remote access error")
	}

	rt2 := connect(t, p.a, p.b)
	if err := p.viaDo(t, rt2, backend.OpWrite, hA, hP, nil); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("put via a revoked region on a new route: %v, want ErrRevoked", err)
	}
	if err := p.viaDo(t, rt2, backend.OpRead, backendtest.Slice(t, hA, 0, 4096), hQ, nil); err != nil {
		t.Fatalf("get via another region after a refused resolve: %v", err)
	}
	backendtest.AssertSame(t, "get via", la[:4096], memQ)
	backendtest.AssertSame(t, "process memory after the refused put", memP, before)
}

// TestViaRefusals: what the far agent's resolver refuses (no process at
// the slot, a forged key, an unknown region) and what the proxy does not
// grant is refused per operation, and the route goes on; a notice naming
// a region that is no proxy is refused without an event.
func TestViaRefusals(t *testing.T) {
	p := newAgentPair(t, DefaultConfig())
	hP, _ := p.fake.region(t, 4096, accessAll)
	hR, _ := p.fake.region(t, 4096, buffer.AccessRead) // read-only
	hA, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)

	forged := hP
	forged.Key[0] ^= 1
	unknown := hP
	unknown.Region += 1000
	for _, tc := range []struct {
		name   string
		remote buffer.Buffer
		via    uint16
		op     backend.Op
		want   error
	}{
		{"unknown via", hP, 99, backend.OpWrite, rdmamgr.ErrPeerGone},
		{"forged key", forged, testVia, backend.OpRead, rdmamgr.ErrReleased}, // BAD_KEY answers RELEASED
		{"unknown region", unknown, testVia, backend.OpWrite, rdmamgr.ErrReleased},
		{"write to read-only", hR, testVia, backend.OpWrite, rdmamgr.ErrAccess},
	} {
		err := p.viaDo(t, p.rt, tc.op, hA, tc.remote, func(wr *backend.WorkRequest) { wr.Via = tc.via })
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Read-only granted: a Get resolves it, then a Put is refused before
	// anything is posted (the cached resolution says read-only).
	if err := p.viaDo(t, p.rt, backend.OpRead, hA, hR, nil); err != nil {
		t.Fatalf("get via a read-only region: %v", err)
	}
	if err := p.viaDo(t, p.rt, backend.OpWrite, hA, hR, nil); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("put via a read-only region: %v, want ErrAccess", err)
	}
	// Out of the region: refused by the initiator's check.
	if err := p.viaDo(t, p.rt, backend.OpWrite, hA, buffer.Buffer{Region: hP.Region, Key: hP.Key, Offset: 4096, Length: 4096, Access: hP.Access}, nil); !errors.Is(err, rdmamgr.ErrOutOfRange) {
		t.Fatalf("put via past the region: %v, want ErrOutOfRange", err)
	}

	// A forged resolution on the initiator's route: its notice names a
	// region of the far agent that is no proxy resolved for a via (its
	// own, with the right key): the bytes land (as a Put's could), no
	// event is delivered anywhere.
	own := newTestInbox(p.regB, 4, 4)
	p.b.SetInbox(own)
	hB, _ := backendtest.Alloc(t, p.regB, 4096, accessAll)
	fake := buffer.Buffer{Region: 424242, Key: hP.Key, Length: 4096, Access: accessAll}
	p.rt.viaMu.Lock()
	fe := &viaEntry{k: viaKey{via: testVia, region: fake.Region, key: fake.Key}, cached: true, res: viaRes{
		addr: hB.RDMA.Addr, rkey: hB.RDMA.RKey, access: accessAll, length: 4096, proxy: hB.Region, proxyKey: hB.Key}}
	p.rt.viaCache[fe.k] = fe
	p.rt.viaLive[fe] = struct{}{}
	p.rt.viaMu.Unlock()
	if err := p.viaDo(t, p.rt, backend.OpWriteImm, hA, fake, nil); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("put-with-imm naming no proxy: %v, want ErrReleased (BAD_KEY)", err)
	}
	own.noEvent(t)
	select {
	case ev := <-p.fake.inbox.Events():
		t.Fatalf("event %+v for a notice naming no proxy", ev)
	default:
	}

	if err := p.viaDo(t, p.rt, backend.OpWrite, hA, hP, nil); err != nil {
		t.Fatalf("put via after the refusals: %v", err)
	}
	if st := p.rt.Stats(); st.InFlight != 0 {
		t.Errorf("route stats %+v", st)
	}
}

// TestViaNotAgent: without a resolver at the far end, an operation with a
// Via is refused with ErrNotSupported: at Post when the route's info says
// so, and by the owner when an initiator sends one anyway (the route goes
// on); an origin without a Via is refused at Post; an origin from an
// initiator that is not an agent is refused by the far agent.
func TestViaNotAgent(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), backendtest.OwnerA)
	b, regB := started(t, DefaultConfig(), backendtest.OwnerB)
	rt := connect(t, a, b).(*route)
	if rt.peerAgent || rt.FarIsAgent() {
		t.Fatal("a route to a backend without a resolver says host agent")
	}
	hA, _ := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	hB, _ := backendtest.Alloc(t, regB, 4096, accessAll)
	p := &agentPair{a: a, b: b, regA: regA, regB: regB}
	for _, op := range []backend.Op{backend.OpWrite, backend.OpRead, backend.OpSend} {
		if err := p.viaDo(t, rt, op, hA, hB, nil); !errors.Is(err, rdmamgr.ErrNotSupported) {
			t.Errorf("%s via to a non-agent: %v, want ErrNotSupported", op, err)
		}
	}
	if err := p.viaDo(t, rt, backend.OpWrite, hA, hB, func(wr *backend.WorkRequest) { wr.Via, wr.Origin = 0, testOrigin }); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Errorf("an origin without a via: %v, want ErrNotSupported", err)
	}
	// An initiator that ignores the info: the owner refuses.
	rt.peerAgent = true
	if err := p.viaDo(t, rt, backend.OpWrite, hA, hB, nil); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Errorf("resolve at a non-agent: %v, want ErrNotSupported", err)
	}
	in := newTestInbox(regB, 4, 4)
	b.SetInbox(in)
	in.post(64)
	if err := p.viaDo(t, rt, backend.OpSend, backendtest.Slice(t, hA, 0, 16), buffer.Buffer{}, nil); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Errorf("send via to a non-agent: %v, want ErrNotSupported", err)
	}
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpWrite, hA, hB); err != nil {
		t.Fatalf("put after the refusals: %v", err)
	}

	// An initiator that is no agent (c), to an agent (the fake's b2):
	// operations with a Via work, an origin is refused.
	b2, _ := started(t, DefaultConfig(), 3)
	fake := newFakeAgent(t, b2, testVia)
	rt2 := connect(t, a, b2).(*route)
	hP, memP := fake.region(t, 4096, accessAll)
	p2 := &agentPair{a: a, b: b2, regA: regA, fake: fake}
	if err := p2.viaDo(t, rt2, backend.OpWriteImm, hA, hP, func(wr *backend.WorkRequest) { wr.Origin = testOrigin }); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Errorf("an origin from a non-agent: %v, want ErrNotSupported", err)
	}
	if err := p2.viaDo(t, rt2, backend.OpWriteImm, hA, hP, nil); err != nil {
		t.Fatalf("put-with-imm via from a non-agent: %v", err)
	}
	if ev := <-fake.inbox.Events(); ev.Peer != backendtest.OwnerA || ev.Region != hP.Region {
		t.Errorf("event %+v, want from the initiator itself", ev)
	}
	_ = memP
}
