package tcp

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The fence and the cuts hold for frames through an agent as for the
// agent's own regions.

// TestViaFence: with many connections and small chunks, a PutWithImm
// through the agent after a burst of Puts through it reaches the process
// only once all their bytes are in the process's memory, in posting
// order, naming the origin.
func TestViaFence(t *testing.T) {
	cfg := Config{ChunkSize: 4096, ConnsPerRoute: 4}
	const rounds, puts, size = 3, 16, 3*4096 + 5
	p := newAgentPair(t, cfg, cfg, puts*size)
	ha, la := backendtest.Alloc(t, p.regA, puts*size, buffer.AccessReadWrite)
	lb := p.procMem
	want := 0
	p.fake.inbox.SetCheck(func(ev backend.Event) error {
		if int(ev.Imm) != want || ev.Peer != testOrigin {
			return errors.New("event out of posting order or without its origin")
		}
		want++
		k := int(ev.Imm) % puts // every Put of the round up to k has landed
		if i := backendtest.FirstDiff(lb[:(k+1)*size], la[:(k+1)*size]); i >= 0 {
			return errors.New("event before the bytes of an earlier Put")
		}
		return nil
	})
	rec := backendtest.NewRecorder(2 * puts)
	for r := range rounds {
		backendtest.Random(t, la)
		var releases []func()
		for i := range puts {
			deadline := time.Now().Add(waitTimeout)
			wr, rel := backendtest.NewWR(t, p.regA, backend.OpWrite, backendtest.Slice(t, ha, i*size, size), backendtest.Slice(t, p.procH, i*size, size), deadline, rec)
			wr.Via = testVia
			releases = append(releases, rel)
			if err := p.route.Post(wr); err != nil {
				t.Fatal(err)
			}
			wi, rel := backendtest.VerbWR(t, p.regA, backend.OpWriteImm, backendtest.Slice(t, ha, i*size, 1), backendtest.Slice(t, p.procH, i*size, 1),
				backendtest.Operands{Imm: uint32(r*puts + i)}, deadline, rec)
			wi.Via, wi.Origin = testVia, testOrigin
			releases = append(releases, rel)
			if err := p.route.Post(wi); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 * puts {
			if res := rec.Wait(t, waitTimeout); res.Err != nil {
				t.Fatalf("%s: %v", res.WR.Op, res.Err)
			}
		}
		for _, rel := range releases {
			rel()
		}
		for range puts {
			select {
			case <-p.fake.inbox.Events():
			case <-time.After(waitTimeout):
				t.Fatal("no event")
			}
		}
	}
	if err := p.fake.inbox.Fault(); err != nil {
		t.Fatal(err)
	}
}

// TestViaRevokeProxyCutsStalledWrite: the agent revokes its proxy (as on a
// cut notice from the process) while a WRITE through it is stalled
// mid-payload: Revoke returns, the rest of the payload goes to the sink,
// the requester hears REVOKED, the process's memory past what arrived
// before is unchanged, and the connection serves on.
func TestViaRevokeProxyCutsStalledWrite(t *testing.T) {
	p := newAgentPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute}, cutRegion)
	h2, mem2 := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	before := bytes.Clone(p.procMem)
	payload := backendtest.RandomData(t, cutRegion)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	writeRaw(t, c, reqBytes(reqHeader{op: opWrite, via: testVia, length: cutRegion, wrid: 7, region: p.procH.Region, key: p.procH.Key}))
	writeRaw(t, c, payload[:cutSent])
	var proxy buffer.Buffer
	waitFor(t, "the server to wait for the payload in the proxy", func() bool {
		var ok bool
		proxy, ok = p.fake.proxy(p.procH.Region)
		return ok && p.b.stalledIn(proxy.Region)
	})
	if err := p.regB.Revoke(cutCtx(t), proxy); err != nil {
		t.Fatalf("Revoke of the proxy with a stalled write: %v", err)
	}
	snap := bytes.Clone(p.procMem)
	finishCut(t, c, payload, p.procMem, before, rdmapb.Code_REVOKED, h2, mem2)
	backendtest.AssertSame(t, "process memory after the revocation", p.procMem, snap)
}
