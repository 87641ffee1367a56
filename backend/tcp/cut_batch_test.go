package tcp

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// A READ answer waiting in a batch when its region is revoked is answered
// REVOKED with no payload; the READ beside it in the same batch gets its
// bytes, and the connection serves on. (The batch once failed whole and
// the connection closed, failing every operation in flight on it: a host
// agent's connection carries many processes' operations, and one
// process's end failed the others'.)
func TestCutInBatchFailsOnlyItsRead(t *testing.T) {
	p := newPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute})
	hA, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	hB, memB := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, memB)
	rA := regionOf(t, p.regB, hA)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))

	// The first flush revokes A and waits until the registry says so;
	// Revoke itself waits for the batch's reference, so it runs aside.
	revoked := make(chan error, 1)
	var once atomic.Bool
	testHookFlush = func() {
		if !once.CompareAndSwap(false, true) {
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			revoked <- p.regB.Revoke(ctx, hA)
		}()
		for p.regB.RemoteErr(rA) == nil {
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookFlush = nil })

	// Both READs in one write: the server reads them in one burst and
	// answers them in one batch.
	req := append(reqBytes(reqHeader{op: opRead, length: 4096, wrid: 1, region: hA.Region, key: hA.Key}),
		reqBytes(reqHeader{op: opRead, length: 4096, wrid: 2, region: hB.Region, key: hB.Key})...)
	writeRaw(t, c, req)
	if r := readResp(t, c); r.wrid != 1 || rdmapb.Code(r.code) != rdmapb.Code_REVOKED || r.length != 0 {
		t.Fatalf("READ of the revoked region: %+v, want REVOKED and no payload", r)
	}
	if r := readResp(t, c); r.wrid != 2 || r.code != 0 || r.length != 4096 {
		t.Fatalf("READ beside it: %+v, want its 4096 bytes", r)
	}
	got := make([]byte, 4096)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("READ beside it: payload: %v", err)
	}
	if !bytes.Equal(got, memB) {
		t.Fatalf("READ beside it: wrong bytes (first diff at %d)", backendtest.FirstDiff(got, memB))
	}
	if err := <-revoked; err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if !once.Load() {
		t.Fatal("the flush hook never ran")
	}
	// In step: the next request on the same connection is served.
	writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 4096, wrid: 3, region: hB.Region, key: hB.Key}))
	if r := readResp(t, c); r.wrid != 3 || r.code != 0 || r.length != 4096 {
		t.Fatalf("next READ on the connection: %+v", r)
	}
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, memB) {
		t.Fatalf("next READ on the connection: %v", err)
	}
	if n := p.b.Served().Rejected; n == 0 {
		t.Fatal("the refused READ is not counted as rejected")
	}
}
