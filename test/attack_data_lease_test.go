//go:build linux

package test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

const (
	atkStallSize = 1 << 20
	atkStallSent = 4 << 10 // payload bytes sent before the stall
)

// atkStall sends a WRITE of the whole of b over a fresh authenticated
// connection, and only atkStallSent bytes of its payload.
func atkStall(t *testing.T, v *atkVictim, b buffer.Buffer, payload []byte) net.Conn {
	t.Helper()
	c, err := atkAuthConn(t, testCtx(t, 30*time.Second), v)
	if err != nil {
		t.Fatalf("holder's connection: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := c.Write(append(frame(opWrite, uint32(len(payload)), 1, b.Region, 0, b.Key), payload[:atkStallSent]...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// atkFinishStall sends the rest of the payload and returns the victim's
// answer to the write.
func atkFinishStall(t *testing.T, c net.Conn, payload []byte) error {
	t.Helper()
	if _, err := c.Write(payload[atkStallSent:]); err != nil {
		return err
	}
	_, err := response(c, opWrite, 1)
	return err
}

// (c) A holder stalls a write mid-payload while the owner revokes, then
// releases another buffer under the same stall: each returns promptly (far
// inside the 30 s frame timeout), the stalled write is refused when its
// payload finally comes, and a legitimate bench runs alongside.
func TestAttackDataStalledWriteRevoke(t *testing.T) {
	v := atkStart(t, 0)
	l := atkNewLegit(t, v)
	base := v.baseline(t)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	benchDone := make(chan struct{})
	go func() { defer close(benchDone); l.bench(ctx, 100000) }()

	payload := bytes.Repeat([]byte{0xEE}, atkStallSize)
	for _, tc := range []struct {
		name string
		end  func(context.Context, buffer.Buffer) error
		want error
	}{
		{"revoke", v.d.client().RevokeBuffer, rdmamgr.ErrRevoked},
		{"release", v.d.client().ReleaseBuffer, rdmamgr.ErrReleased},
	} {
		b := remoteBuffer(t, v.d, atkStallSize, buffer.AccessReadWrite)
		c := atkStall(t, v, b, payload)
		time.Sleep(300 * time.Millisecond) // the victim waits for the rest
		t0 := time.Now()
		// 10 s: the client timeout, a third of the frame timeout.
		if err := tc.end(testCtx(t, 10*time.Second), b); err != nil {
			t.Fatalf("%s with a stalled write: %v", tc.name, err)
		}
		t.Logf("%s returned after %v with a write stalled mid-payload", tc.name, time.Since(t0).Round(time.Millisecond))
		if err := atkFinishStall(t, c, payload); !errors.Is(err, tc.want) {
			t.Fatalf("stalled write after %s: %v, want %v", tc.name, err, tc.want)
		}
		// Nothing is granted on the buffer any more.
		if err := wait(l.qp.Get(l.dst, slice(b, 0, atkOpSize))); !errors.Is(err, tc.want) {
			t.Fatalf("get after %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	cancel()
	<-benchDone
	peak := v.peakSample()
	after := v.settle(t, base)
	atkNothingGranted(t, v, 2) // the legitimate buffer and the revoked one
	l.report(t, "c stalled-write-revoke", base, peak, after, time.Since(start))
}

// (d) A write admitted just after a lease was granted stalls past the
// lease: the rest of its payload, sent after expiry, is refused with
// LEASE_EXPIRED (or RELEASED if the reaper freed the buffer first).
func TestAttackDataStalledWriteLease(t *testing.T) {
	const lease = 2 * time.Second
	v := atkStart(t, 0)
	l := atkNewLegit(t, v)
	base := v.baseline(t)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	benchDone := make(chan struct{})
	go func() { defer close(benchDone); l.bench(ctx, 100000) }()

	b, err := v.d.client().RequestLeasedBuffer(testCtx(t, 30*time.Second), atkStallSize, buffer.AccessReadWrite, lease)
	if err != nil {
		t.Fatalf("leased buffer: %v", err)
	}
	payload := bytes.Repeat([]byte{0xEE}, atkStallSize)
	c := atkStall(t, v, b, payload)
	time.Sleep(lease + 500*time.Millisecond) // past expiry by a margin
	err = atkFinishStall(t, c, payload)
	if !errors.Is(err, rdmamgr.ErrExpired) && !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("write stalled past its lease: %v, want LEASE_EXPIRED", err)
	}
	t.Logf("write stalled past its lease: %v", err)
	cancel()
	<-benchDone
	peak := v.peakSample()
	after := v.settle(t, base)
	l.report(t, "d stalled-write-lease", base, peak, after, time.Since(start))
}

// (e) A remote peer hears one code for a wrong key and for a region that
// does not exist, on the data plane (and, once the control plane answers
// remote peers with backend.RemoteCode, there too).
func TestAttackDataProbeRegions(t *testing.T) {
	v := atkStart(t, 0)
	l := atkNewLegit(t, v)
	base := v.baseline(t)
	start := time.Now()
	c, err := atkAuthConn(t, testCtx(t, 30*time.Second), v)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wrong := l.remote.Key
	wrong[0] ^= 1
	probes := []struct {
		name   string
		op     byte
		region uint64
		key    buffer.Key
	}{
		{"write, wrong key", opWrite, l.remote.Region, wrong},
		{"read, wrong key", opRead, l.remote.Region, wrong},
		{"write, no such region", opWrite, l.remote.Region + 1000, l.remote.Key},
		{"read, no such region", opRead, l.remote.Region + 1000, wrong},
	}
	for i, p := range probes {
		wrid := uint64(100 + i)
		msg := frame(p.op, 64, wrid, p.region, 0, p.key)
		if p.op == opWrite {
			msg = append(msg, make([]byte, 64)...)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		// One code, RELEASED, for all: the test maps each code to its
		// own sentinel, so a BAD_KEY would show as ErrBadKey.
		_, err := response(c, p.op, wrid)
		if !errors.Is(err, rdmamgr.ErrReleased) || errors.Is(err, rdmamgr.ErrBadKey) {
			t.Errorf("%s: %v, want code %v like every other probe", p.name, err, rdmapb.Code_RELEASED)
		}
	}
	// Still in step and serving on the same connection.
	if err := atkRawPutGet(c, l.remote, 200, bytes.Repeat([]byte{0x42}, 4096)); err != nil {
		t.Fatalf("the prober's connection after the probes: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	l.bench(ctx, 1000)
	cancel()
	peak := v.peakSample()
	after := v.settle(t, base)
	atkNothingGranted(t, v, 1)
	l.report(t, "e region-probe", base, peak, after, time.Since(start))

	t.Run("control plane", func(t *testing.T) {
		wrongKey := l.remote
		wrongKey.Key = wrong
		noSuch := l.remote
		noSuch.Region += 1000
		e1 := v.d.client().RevokeBuffer(testCtx(t, 30*time.Second), wrongKey)
		e2 := v.d.client().RevokeBuffer(testCtx(t, 30*time.Second), noSuch)
		if e1 == nil || e2 == nil {
			t.Fatalf("revoke with a wrong key: %v, of no such region: %v", e1, e2)
		}
		if errors.Is(e1, rdmamgr.ErrBadKey) != errors.Is(e2, rdmamgr.ErrBadKey) || errors.Is(e1, rdmamgr.ErrReleased) != errors.Is(e2, rdmamgr.ErrReleased) {
			t.Fatalf("the control plane tells a wrong key from no such region: %v / %v", e1, e2)
		}
	})
}
