//go:build ibverbs

package ibverbs

import (
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// More operations through a far agent (via_test.go has the pair): the
// device's own checks of a proxy, lists, and Close during a resolve.

// TestViaProxyExactAccess: the far agent's device registered the proxy
// with exactly the access it grants: an initiator that believes a
// read-only proxy writable (its cached resolution tampered with) has its
// Put refused by the device, and the process's memory is untouched.
func TestViaProxyExactAccess(t *testing.T) {
	p := newAgentPair(t, DefaultConfig())
	hR, memR := p.fake.region(t, 4096, buffer.AccessRead)
	hA, la := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, memR)
	if err := p.viaDo(t, p.rt, backend.OpRead, hA, hR, nil); err != nil {
		t.Fatalf("get via a read-only region: %v", err)
	}
	backendtest.AssertSame(t, "get via", la, memR)
	k := viaKey{via: testVia, region: hR.Region, key: hR.Key}
	p.rt.viaMu.Lock()
	e, ok := p.rt.viaCache[k]
	if ok {
		e.res.access |= buffer.AccessWrite
	}
	p.rt.viaMu.Unlock()
	if !ok || e.res.access&buffer.AccessAtomic != 0 {
		t.Fatalf("cached resolution %+v (%v)", e, ok)
	}
	before := append([]byte(nil), memR...)
	backendtest.Random(t, la)
	err := p.viaDo(t, p.rt, backend.OpWrite, hA, hR, nil)
	if !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("put on a read-only proxy's rkey: %v, want ErrAccess from the device", err)
	}
	backendtest.AssertSame(t, "read-only process memory", memR, before)
}

// TestViaPostList: a list whose operations need resolves (PostList posts
// what it prepared, resolves, goes on) completes in order: each event
// comes after its bytes, the Send's message after all of them.
func TestViaPostList(t *testing.T) {
	p := newAgentPair(t, DefaultConfig())
	const n, size = 6, 1024
	hP, memP := p.fake.region(t, n*size, accessAll)
	hQ, memQ := p.fake.region(t, n*size, accessAll)
	hA, la := backendtest.Alloc(t, p.regA, 2*n*size, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	p.fake.inbox.SetCheck(func(ev backend.Event) error {
		mem := memP
		if ev.Region == hQ.Region {
			mem = memQ
		}
		if !bytesEqual(mem[ev.Offset:ev.Offset+ev.Length], la[ev.Imm:ev.Imm+uint32(ev.Length)]) {
			return errors.New("event before its bytes")
		}
		return nil
	})
	rb, _ := backendtest.Alloc(t, p.fake.proc, 64, buffer.AccessReadWrite)
	if err := p.fake.inbox.Post(rb); err != nil {
		t.Fatal(err)
	}
	rec := backendtest.NewRecorder(2*n + 1)
	var wrs []*backend.WorkRequest
	for i := range 2 * n {
		remote, op := backendtest.Slice(t, hP, (i/2)*size, size), backend.OpWrite
		if i%2 == 1 {
			remote, op = backendtest.Slice(t, hQ, (i/2)*size, size), backend.OpWriteImm
		}
		wr, release := backendtest.NewWR(t, p.regA, op, backendtest.Slice(t, hA, i*size, size), remote, time.Now().Add(waitTimeout), rec)
		defer release()
		wr.Via, wr.Imm, wr.Origin = testVia, uint32(i*size), testOrigin
		wrs = append(wrs, wr)
	}
	send, release := backendtest.NewWR(t, p.regA, backend.OpSend, backendtest.Slice(t, hA, 0, 8), buffer.Buffer{}, time.Now().Add(waitTimeout), rec)
	defer release()
	send.Via, send.Origin = testVia, testOrigin
	wrs = append(wrs, send)
	if k, err := p.rt.PostList(wrs); k != len(wrs) || err != nil {
		t.Fatalf("PostList: %d posted, %v", k, err)
	}
	for range wrs {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("%s: %v", res.WR.Op, res.Err)
		}
	}
	for i := range n {
		backendtest.AssertSame(t, "put via", memP[i*size:(i+1)*size], la[2*i*size:(2*i+1)*size])
		ev := <-p.fake.inbox.Events()
		if want := uint32((2*i + 1) * size); ev.Imm != want || ev.Peer != testOrigin {
			t.Fatalf("event %d: %+v, want imm %d from the origin", i, ev, want)
		}
	}
	if m := <-p.fake.inbox.Messages(); m.Peer != testOrigin || len(m.Mem) != 8 {
		t.Fatalf("message %+v", m)
	}
	if n := p.fake.resolves.Load(); n != 2 {
		t.Errorf("%d resolves for two regions", n)
	}
}

func bytesEqual(a, b []byte) bool { return backendtest.FirstDiff(a, b) < 0 }

// TestViaCloseDuringResolve: a far agent whose resolver waits (the
// process does not answer) does not hold up its backend's Close: Close
// ends the resolve and the route, and says goodbye, so the initiator's
// operation fails with the route (ErrPeerGone), not at the end of its
// wait for the answer (ErrDeadline, on the old code: 7 s later).
func TestViaCloseDuringResolve(t *testing.T) {
	p := newAgentPair(t, DefaultConfig())
	hP, _ := p.fake.region(t, 4096, accessAll)
	hA, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	p.fake.block.Store(true)
	errc := make(chan error, 1)
	go func() { errc <- p.viaDo(t, p.rt, backend.OpWrite, hA, hP, nil) }()
	select {
	case <-p.fake.entered:
	case <-time.After(waitTimeout):
		t.Fatal("no resolve")
	}
	closed := make(chan error, 1)
	go func() { closed <- p.b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(agentapi.ResolveTimeout / 2):
		t.Fatal("Close waited for the resolver")
	}
	select {
	case err := <-errc:
		if !errors.Is(err, rdmamgr.ErrPeerGone) || errors.Is(err, rdmamgr.ErrDeadline) {
			t.Fatalf("a put via a closed agent: %v, want ErrPeerGone (its goodbye)", err)
		}
		select {
		case <-p.rt.Done():
		default:
			t.Fatal("the initiator's route outlived the far backend's goodbye")
		}
	case <-time.After(waitTimeout):
		t.Fatal("the put via a closed agent never ended")
	}
}
