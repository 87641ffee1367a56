package tcp

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestNoStaleWriteDeadline: a READ's answer is written under a deadline
// (FrameTimeout, or cutGrace once its region is cut); a later batch of
// WRITE answers only is written without one. Before, that deadline was
// never cleared, so the first answer-only batch written after it passed
// failed with "i/o timeout" and the connection closed, failing every
// operation on it (seen under load: a staged device Get, then Puts).
func TestNoStaleWriteDeadline(t *testing.T) {
	const frame = 300 * time.Millisecond
	p := newPair(t, Config{}, Config{FrameTimeout: frame})
	h, mem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, mem)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))

	writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 4096, wrid: 1, region: h.Region, key: h.Key}))
	if r := readResp(t, c); r.code != 0 || r.wrid != 1 || r.length != 4096 {
		t.Fatalf("read answer %+v", r)
	}
	got := make([]byte, 4096)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	backendtest.AssertSame(t, "read payload", got, mem)

	time.Sleep(frame + 200*time.Millisecond) // the READ's write deadline has passed
	p2 := bytes.Repeat([]byte{0x5A}, 512)
	writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: 512, wrid: 2, region: h.Region, key: h.Key}))
	writeRaw(t, c, p2)
	if r := readResp(t, c); r.code != 0 || r.wrid != 2 {
		t.Fatalf("write after the READ's deadline passed: %+v", r)
	}
	backendtest.AssertSame(t, "write payload", mem[:512], p2)
}
