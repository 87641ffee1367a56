package tcp

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// writeAThenStallB sends a whole 512-byte WRITE (wrid 1) and, in the same
// write, a WRITE (wrid 2) of region hb's bSize bytes with only its first
// KiB of payload, and waits until the server waits for the rest.
func writeAThenStallB(t *testing.T, p *pair, c net.Conn, ha, hb buffer.Buffer, bSize int) []byte {
	t.Helper()
	msg := reqBytes(reqHeader{op: opWrite, length: 512, wrid: 1, region: ha.Region, key: ha.Key})
	msg = append(msg, backendtest.RandomData(t, 512)...)
	msg = append(msg, reqBytes(reqHeader{op: opWrite, length: uint32(bSize), wrid: 2, region: hb.Region, key: hb.Key})...)
	payload := backendtest.RandomData(t, bSize)
	msg = append(msg, payload[:1024]...)
	writeRaw(t, c, msg)
	waitFor(t, "the server to wait for the payload", func() bool { return p.b.stalledIn(hb.Region) })
	return payload[1024:]
}

// answered reports whether an answer can be read from c within wait.
func answered(t *testing.T, c net.Conn, wait time.Duration) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Now().Add(time.Minute))
	var b [1]byte
	n, err := c.Read(b[:])
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if err != nil || n != 1 {
		t.Fatalf("read: %d, %v", n, err)
	}
	t.Fatal("an answer arrived: the test reads no further (the stream is out of step)")
	return true
}

// TestAnswersWaitForSmallPayload: the answer of a WRITE waits while the
// rest of a small WRITE's payload is on its way, and both answers then go
// out together (one send instead of two).
func TestAnswersWaitForSmallPayload(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	ha, _ := backendtest.Alloc(t, p.regB, 512, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	rest := writeAThenStallB(t, p, c, ha, hb, 4096)
	if answered(t, c, 200*time.Millisecond) {
		return
	}
	writeRaw(t, c, rest)
	for _, want := range []uint64{1, 2} {
		if r := readResp(t, c); r.code != 0 || r.wrid != want {
			t.Fatalf("answer %+v, want wrid %d OK", r, want)
		}
	}
}

// TestAnswerNotHeldByLargePayload: a large payload still arriving does
// not hold the answers before it: they go out first.
func TestAnswerNotHeldByLargePayload(t *testing.T) {
	const big = 2 * largeReadBuf
	p := newPair(t, Config{}, Config{})
	ha, _ := backendtest.Alloc(t, p.regB, 512, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, p.regB, big, buffer.AccessReadWrite)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	rest := writeAThenStallB(t, p, c, ha, hb, big)
	if r := readResp(t, c); r.code != 0 || r.wrid != 1 {
		t.Fatalf("answer %+v, want wrid 1 OK while wrid 2's payload is on its way", r)
	}
	writeRaw(t, c, rest)
	if r := readResp(t, c); r.code != 0 || r.wrid != 2 {
		t.Fatalf("answer %+v, want wrid 2 OK", r)
	}
}
