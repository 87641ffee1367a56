package tcp

import (
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// TestStagingBounded: the server's pinned staging memory is bounded over
// its connections. With maxOut pairs out (two stalled device WRITEs), a
// third connection's device WRITE and READ are refused with
// RESOURCE_EXHAUSTED (ErrLimit) after the bounded wait, the WRITE's
// payload drained (the connection stays in step); once the stalled
// WRITEs end, only maxIdle pairs stay pinned and device operations are
// served again.
func TestStagingBounded(t *testing.T) {
	p, w, h := devicePair(t, cutRegion, Config{FrameTimeout: 10 * time.Minute})
	p.b.stage.maxOut, p.b.stage.maxIdle, p.b.stage.wait = 2, 1, 10*time.Millisecond
	h2, mem2 := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	payload := backendtest.RandomData(t, cutRegion)
	base := w.Stats().LiveHost
	var stalled [2]net.Conn
	for i := range stalled {
		c := authed(t, p.b)
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: uint32(len(payload)), wrid: 7, region: h.Region, key: h.Key}))
		writeRaw(t, c, payload[:cutSent])
		stalled[i] = c
	}
	waitFor(t, "both stalled writes to take a staging pair", func() bool { return w.Stats().LiveHost-base == 4 })

	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: 512, wrid: 8, region: h.Region, key: h.Key}))
	writeRaw(t, c, payload[:512])
	if r := readResp(t, c); rdmapb.Code(r.code) != rdmapb.Code_RESOURCE_EXHAUSTED || r.wrid != 8 {
		t.Fatalf("device WRITE past the staging bound: %+v, want RESOURCE_EXHAUSTED", r)
	}
	writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 512, wrid: 9, region: h.Region, key: h.Key}))
	if r := readResp(t, c); rdmapb.Code(r.code) != rdmapb.Code_RESOURCE_EXHAUSTED || r.wrid != 9 {
		t.Fatalf("device READ past the staging bound: %+v, want RESOURCE_EXHAUSTED", r)
	}
	writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: 512, wrid: 10, region: h2.Region, key: h2.Key}))
	writeRaw(t, c, payload[:512])
	if r := readResp(t, c); r.code != 0 || r.wrid != 10 {
		t.Fatalf("host WRITE after the refusals: %+v", r)
	}
	backendtest.AssertSame(t, "host write after the refusals", mem2[:512], payload[:512])

	for _, s := range stalled {
		writeRaw(t, s, payload[cutSent:])
		if r := readResp(t, s); r.code != 0 || r.wrid != 7 {
			t.Fatalf("stalled device WRITE: %+v", r)
		}
	}
	waitFor(t, "the staging pairs past maxIdle to be freed", func() bool { return w.Stats().LiveHost-base == 2 })
	writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: 512, wrid: 11, region: h.Region, key: h.Key}))
	writeRaw(t, c, payload[:512])
	if r := readResp(t, c); r.code != 0 || r.wrid != 11 {
		t.Fatalf("device WRITE once pairs are back: %+v", r)
	}
	if got := w.Stats().LiveHost - base; got != 2 {
		t.Fatalf("%d pinned buffers live when idle, want 2", got)
	}
}
