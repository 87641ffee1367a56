package tcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

const (
	cutRegion = 64 << 10
	cutSent   = 1 << 10 // payload bytes sent before the stall
)

// stallWrite sends a WRITE of the whole region h and cutSent bytes of its
// payload, and waits until the server waits for the rest.
func stallWrite(t *testing.T, b *Backend, c net.Conn, h buffer.Buffer, payload []byte) {
	t.Helper()
	writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: uint32(len(payload)), wrid: 7, region: h.Region, key: h.Key}))
	writeRaw(t, c, payload[:cutSent])
	waitFor(t, "the server to wait for the payload", func() bool { return b.stalledIn(h.Region) })
}

// finishCut sends the rest of the payload and expects code want; the
// region beyond what was sent before the cut is unchanged, and the
// connection still serves.
func finishCut(t *testing.T, c net.Conn, payload, mem, before []byte, want rdmapb.Code, h2 buffer.Buffer, mem2 []byte) {
	t.Helper()
	writeRaw(t, c, payload[cutSent:])
	r := readResp(t, c)
	if rdmapb.Code(r.code) != want || r.wrid != 7 {
		t.Fatalf("response %+v, want code %v", r, want)
	}
	if mem != nil && !bytes.Equal(mem[cutSent:], before[cutSent:]) {
		t.Fatalf("payload sent after the cut landed in the region (first diff at %d)", cutSent+backendtest.FirstDiff(mem[cutSent:], before[cutSent:]))
	}
	// In step: the next request on the same connection is served.
	p := bytes.Repeat([]byte{0x5A}, 512)
	writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: 512, wrid: 8, region: h2.Region, key: h2.Key}))
	writeRaw(t, c, p)
	if r := readResp(t, c); r.code != 0 || r.wrid != 8 {
		t.Fatalf("next write on the connection: %+v", r)
	}
	backendtest.AssertSame(t, "next write", mem2[:512], p)
}

func cutEnv(t *testing.T) (*pair, net.Conn, buffer.Buffer, []byte, []byte, []byte, buffer.Buffer, []byte) {
	t.Helper()
	p := newPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute})
	h, mem := backendtest.Alloc(t, p.regB, cutRegion, buffer.AccessReadWrite)
	h2, mem2 := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, mem)
	before := bytes.Clone(mem)
	payload := backendtest.RandomData(t, cutRegion)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return p, c, h, mem, before, payload, h2, mem2
}

// cutCtx bounds Revoke and Release far below the frame timeout: they
// return only if the stalled payload was cut.
func cutCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRevokeCutsStalledWrite(t *testing.T) {
	p, c, h, mem, before, payload, h2, mem2 := cutEnv(t)
	stallWrite(t, p.b, c, h, payload)
	if err := p.regB.Revoke(cutCtx(t), h); err != nil {
		t.Fatalf("Revoke with a stalled write: %v", err)
	}
	snap := bytes.Clone(mem) // nothing may change from here on
	finishCut(t, c, payload, mem, before, rdmapb.Code_REVOKED, h2, mem2)
	backendtest.AssertSame(t, "region after the revocation", mem, snap)
}

func TestReleaseCutsStalledWrite(t *testing.T) {
	p, c, h, _, _, payload, h2, mem2 := cutEnv(t)
	stallWrite(t, p.b, c, h, payload)
	if err := p.regB.Release(cutCtx(t), h); err != nil {
		t.Fatalf("Release with a stalled write: %v", err)
	}
	// The memory is unmapped: only the answer can be checked.
	finishCut(t, c, payload, nil, nil, rdmapb.Code_RELEASED, h2, mem2)
}

// A write whose payload stalls past the lease: what arrives after expiry
// goes to the sink, and the requester hears LEASE_EXPIRED.
func TestLeaseCutsStalledWrite(t *testing.T) {
	p, c, h, mem, before, payload, h2, mem2 := cutEnv(t)
	if err := p.regB.SetLease(h, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	stallWrite(t, p.b, c, h, payload)
	waitFor(t, "the lease to end", func() bool { return errors.Is(p.regB.RemoteErr(regionOf(t, p.regB, h)), rdmamgr.ErrExpired) })
	time.Sleep(50 * time.Millisecond) // past expiry by a margin: the rest is sent late
	finishCut(t, c, payload, mem, before, rdmapb.Code_LEASE_EXPIRED, h2, mem2)
}

// A lease renewed while the payload stalls does not cut it.
func TestRenewedLeaseKeepsWrite(t *testing.T) {
	p, c, h, mem, _, payload, _, _ := cutEnv(t)
	if err := p.regB.SetLease(h, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	stallWrite(t, p.b, c, h, payload)
	if err := p.regB.SetLease(h, time.Hour); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // past the first lease
	writeRaw(t, c, payload[cutSent:])
	if r := readResp(t, c); r.code != 0 || r.wrid != 7 {
		t.Fatalf("response %+v", r)
	}
	backendtest.AssertSame(t, "region", mem, payload)
}

// A peer that stops reading a large READ cannot hold a revocation: the
// batch's write is cut and the connection closed.
func TestRevokeCutsStalledRead(t *testing.T) {
	p := newPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute, SocketBuffer: 4096})
	h, _ := backendtest.Alloc(t, p.regB, 8<<20, buffer.AccessReadWrite)
	c := authed(t, p.b)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 8 << 20, wrid: 9, region: h.Region, key: h.Key}))
	waitFor(t, "the server to block writing", func() bool { return p.b.stalledIn(h.Region) })
	time.Sleep(50 * time.Millisecond) // let the writev fill the socket
	if err := p.regB.Revoke(cutCtx(t), h); err != nil {
		t.Fatalf("Revoke with a stalled read: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not closed after the cut (%d bytes read)", n)
	}
	if n >= respHeaderSize+8<<20 {
		t.Fatalf("the whole READ went out after the revocation")
	}
	if !errors.Is(codeErr(opRead, byte(backend.Code(rdmamgr.ErrRevoked))), rdmamgr.ErrRevoked) {
		t.Fatal("REVOKED does not map back")
	}
}

// regionOf resolves a handle to its region (the owner's view).
func regionOf(t *testing.T, reg *memreg.Registry, h buffer.Buffer) *memreg.Region {
	t.Helper()
	ref, err := reg.AcquireLocal(h)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	return ref.Region()
}
