package backendtest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Refusals: a request the owner must refuse (access, key, released,
// revoked, out of range, malformed) fails with the declared error and
// changes nothing; the backends keep serving.

func testWriteReadOnly(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 8 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessRead)
	Random(t, la)
	Random(t, lb)
	before := bytes.Clone(lb)
	err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb)
	if !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("put to a read-only buffer: %v, want rdmamgr.ErrAccess", err)
	}
	t.Logf("put to a read-only buffer: %v", err)
	AssertSame(t, "read-only buffer after a refused put", lb, before)
	p.afterRemoteError(t, p.Route)
	// Reading it is allowed.
	if err := Do(t, f.Timeout, p.NewRoute(t), p.RegA, backend.OpRead, ha, hb); err != nil {
		t.Fatalf("get from a read-only buffer: %v", err)
	}
	AssertSame(t, "local after get from a read-only buffer", la, lb)
}

func testReadWriteOnly(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 8 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessWrite)
	Random(t, la)
	Random(t, lb)
	beforeA, beforeB := bytes.Clone(la), bytes.Clone(lb)
	err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, ha, hb)
	if !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("get from a write-only buffer: %v, want rdmamgr.ErrAccess", err)
	}
	AssertSame(t, "local after a refused get", la, beforeA)
	AssertSame(t, "write-only buffer after a refused get", lb, beforeB)
	p.afterRemoteError(t, p.Route)
}

func testWrongKey(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 4 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	Random(t, lb)
	before := bytes.Clone(lb)
	bad := hb
	bad.Key[0] ^= 0xff
	if bad.RDMA.RKey != 0 {
		bad.RDMA.RKey ^= 0xA5 // the key byte of the rkey: same MR index, wrong key
	}
	for i, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		err := Do(t, f.Timeout, rt, p.RegA, op, ha, bad)
		if !errors.Is(err, f.WrongKeyErr) {
			t.Fatalf("%s with a wrong key: %v, want %v", op, err, f.WrongKeyErr)
		}
		t.Logf("%s with a wrong key: %v", op, err)
		AssertSame(t, "owner memory after a wrong key", lb, before)
		p.afterRemoteError(t, rt)
	}
}

func testReleased(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 4 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put before release: %v", err)
	}
	if err := p.RegB.Release(context.Background(), hb); err != nil {
		t.Fatalf("release at the owner: %v", err)
	}
	for i, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		err := Do(t, f.Timeout, rt, p.RegA, op, ha, hb)
		if !errors.Is(err, f.ReleasedErr) {
			t.Fatalf("%s on a released region: %v, want %v", op, err, f.ReleasedErr)
		}
		t.Logf("%s on a released region: %v", op, err)
		p.afterRemoteError(t, rt)
	}
}

// testRevoked: once Registry.Revoke returns, peers can neither write nor
// read the region, its memory is unchanged, and the owner's own use of it
// (here: as the local side of a put to the peer) goes on.
func testRevoked(t *testing.T, f Factory) {
	if f.RevokedErr == nil {
		t.Skip("the factory declares no revocation error")
	}
	p := NewPair(t, f)
	const n = 4 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put before revoke: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	if err := p.RegB.Revoke(ctx, hb); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	Random(t, lb)
	before := bytes.Clone(lb)
	for i, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		err := Do(t, f.Timeout, rt, p.RegA, op, ha, hb)
		if !errors.Is(err, f.RevokedErr) {
			t.Fatalf("%s on a revoked region: %v, want %v", op, err, f.RevokedErr)
		}
		t.Logf("%s on a revoked region: %v", op, err)
		AssertSame(t, "revoked region", lb, before)
		p.afterRemoteError(t, rt)
	}
	// The owner still uses it: B puts from it to A on a route B -> A.
	rt, err := Connect(f.Timeout, p.B, p.A, OwnerA, OwnerB)
	if err != nil {
		t.Fatalf("connect B to A: %v", err)
	}
	defer rt.Close()
	ha2, la2 := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	if err := Do(t, f.Timeout, rt, p.RegB, backend.OpWrite, hb, ha2); err != nil {
		t.Fatalf("owner's put from its revoked region: %v", err)
	}
	AssertSame(t, "peer after the owner's put from a revoked region", la2, lb)
}

func testOutOfRange(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 4 << 10
	const over = 512
	ha, la := Alloc(t, p.RegA, over, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	Random(t, lb)
	before := bytes.Clone(lb)
	forged := hb
	forged.Offset = n - over/2 // half inside, half past the end
	forged.Length = over
	err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, forged)
	if !errors.Is(err, f.OutOfRangeErr) {
		t.Fatalf("put past the region: %v, want %v", err, f.OutOfRangeErr)
	}
	t.Logf("put past the region: %v", err)
	AssertSame(t, "owner memory after a put past the region", lb, before)
	p.afterRemoteError(t, p.Route)
}

// testLengthMismatch: a request Post refuses is never completed.
func testLengthMismatch(t *testing.T, f Factory) {
	p := NewPair(t, f)
	ha, _ := Alloc(t, p.RegA, 100, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, 200, buffer.AccessReadWrite)
	rec := NewRecorder(1)
	wr, release := NewWR(t, p.RegA, backend.OpWrite, ha, hb, time.Now().Add(f.Timeout), rec)
	defer release()
	if err := p.Route.Post(wr); err == nil {
		t.Fatal("post with local 100 bytes and remote 200 accepted")
	}
	wr2, release2 := NewWR(t, p.RegA, backend.Op(99), ha, Slice(t, hb, 0, 100), time.Now().Add(f.Timeout), rec)
	defer release2()
	if err := p.Route.Post(wr2); err == nil {
		t.Fatal("post of an unknown op accepted")
	}
	time.Sleep(10 * time.Millisecond)
	rec.None(t)
	p.checkWorks(t)
}

func testHostileInfo(t *testing.T, f Factory) {
	p := NewPair(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	first, good, err := p.A.PrepareRoute(ctx, OwnerB)
	if err != nil {
		t.Fatalf("PrepareRoute: %v", err)
	}
	defer first.Abort()
	junk := [][]byte{nil, {}, {0xff}, bytes.Repeat([]byte{0xff}, 64), good[:len(good)-1], append(bytes.Clone(good), 0)}
	for _, info := range junk {
		_, err := p.B.AcceptRoute(ctx, OwnerA, info)
		if !errors.Is(err, rdmamgr.ErrProtocol) && !errors.Is(err, rdmamgr.ErrVersion) {
			t.Errorf("AcceptRoute(%x): %v, want rdmamgr.ErrProtocol or ErrVersion", info, err)
		}
	}
	for _, info := range junk {
		pending, _, err := p.A.PrepareRoute(ctx, OwnerB)
		if err != nil {
			t.Fatalf("PrepareRoute: %v", err)
		}
		rt, err := pending.Complete(ctx, info)
		if err == nil {
			rt.Close()
			t.Errorf("Complete(%x) accepted", info)
		}
		pending.Abort()
	}
	p.checkWorks(t)
}
