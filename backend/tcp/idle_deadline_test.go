package tcp

import (
	"io"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestIdleDeadlineAfterServing: readHeader sets the idle read deadline
// again only once the last one is older than its slack (idleDeadline),
// but a frame that reads a payload under a deadline of its own (a WRITE
// whose payload comes after its header) replaces it, and then the next
// header's read must set it again: the connection, silent after that
// WRITE, is still closed, and no sooner than IdleTimeout after it. (With
// the idle deadline kept across the WRITE, the socket had no deadline
// left and the connection stayed open.)
func TestIdleDeadlineAfterServing(t *testing.T) {
	idle := 1600 * time.Millisecond // slack 100 ms: the frames below all fall within it
	p := newPair(t, Config{}, Config{IdleTimeout: idle})
	h, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(10 * idle))
	for i := range 20 { // READs: the idle deadline set once, then kept
		writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 8, wrid: uint64(i + 1), region: h.Region, key: h.Key}))
		if resp := readResp(t, c); resp.code != 0 {
			t.Fatalf("READ %d: code %d", i, resp.code)
		}
		if _, err := io.ReadFull(c, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
	}
	writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: 64, wrid: 99, region: h.Region, key: h.Key}))
	time.Sleep(10 * time.Millisecond) // the payload later: the server reads it under its own deadline
	writeRaw(t, c, make([]byte, 64))
	if resp := readResp(t, c); resp.code != 0 || resp.wrid != 99 {
		t.Fatalf("WRITE answered %+v", resp)
	}
	silent := time.Now()
	if got := expectClosed(t, c); len(got) != 0 {
		t.Fatalf("server sent %q on an idle connection", got)
	}
	if d := time.Since(silent); d < idle*9/10 {
		t.Fatalf("closed %v after the last frame, before IdleTimeout (%v)", d, idle)
	}
}
