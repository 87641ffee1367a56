package tcp

import (
	"bytes"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestBatchStaged: a batch's headers and its WRITE payloads of at most
// stageCopyMax bytes are copied into one buffer of the writev per run; a
// larger payload is written from its memory in place, between two runs.
// The copied payloads are taken when the batch is gathered: memory
// changed after that (here, by the hook just before the write) does not
// reach the wire, where the large payload's change does. Before, every
// header and payload was a buffer of its own (2 per WRITE).
func TestBatchStaged(t *testing.T) {
	var mu sync.Mutex
	var armed bool
	var lens []int
	var owner [][]byte
	t.Cleanup(func() { testHookBatch = nil }) // after the backend's cleanup
	testHookBatch = func(cc *clientConn) {
		mu.Lock()
		defer mu.Unlock()
		if !armed {
			return
		}
		armed = false
		for _, b := range cc.iov {
			lens = append(lens, len(b))
		}
		for _, m := range owner {
			for i := range m {
				m[i] = 0xEE
			}
		}
	}
	f := newFakeServer(t)
	a, regA := newBackend(t, Config{ConnsPerRoute: 1}, backendtest.OwnerA)
	rt := f.connect(t, a)
	fc := f.accept(t)
	_, small1 := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	_, big := backendtest.Alloc(t, regA, 1024, buffer.AccessReadWrite)
	_, small2 := backendtest.Alloc(t, regA, stageCopyMax, buffer.AccessReadWrite)
	_, rd := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	fill := func(m []byte, v byte) []byte {
		for i := range m {
			m[i] = v
		}
		return bytes.Clone(m)
	}
	want1, want2 := fill(small1, 1), fill(small2, 3)
	fill(big, 2)
	rec := backendtest.NewRecorder(8)
	wr := func(op backend.Op, local []byte) *backend.WorkRequest {
		return &backend.WorkRequest{Op: op, Local: local, Remote: fakeRemote(uint64(len(local))),
			Deadline: time.Now().Add(time.Hour), Done: rec}
	}
	mu.Lock()
	armed, owner = true, [][]byte{small1, big, small2}
	mu.Unlock()
	list := []*backend.WorkRequest{wr(backend.OpWrite, small1), wr(backend.OpWrite, big),
		wr(backend.OpRead, rd), wr(backend.OpWrite, small2)}
	if k, err := rt.(backend.ListPoster).PostList(list); k != len(list) || err != nil {
		t.Fatalf("PostList = %d, %v", k, err)
	}
	var frames []reqHeader
	for i, want := range [][]byte{want1, bytes.Repeat([]byte{0xEE}, 1024), nil, want2} {
		h := fc.readReq(t)
		frames = append(frames, h)
		if want == nil {
			continue
		}
		if got := fc.readPayload(t, int(h.length)); !bytes.Equal(got, want) {
			t.Errorf("frame %d (op %d, %d bytes): payload %x..., want %x...", i, h.op, h.length, got[:4], want[:4])
		}
	}
	mu.Lock()
	got := lens
	mu.Unlock()
	wantLens := []int{2*reqHeaderSize + 64, 1024, 2*reqHeaderSize + stageCopyMax} // the large payload's header before it
	if !slices.Equal(got, wantLens) {
		t.Errorf("the batch's buffers: %v bytes, want %v", got, wantLens)
	}
	for _, h := range frames {
		resp := respHeader{op: h.op, wrid: h.wrid}
		var pay []byte
		if h.op == opRead {
			resp.length, pay = h.length, make([]byte, h.length)
		}
		fc.respond(t, resp, pay)
	}
	for range list {
		if r := rec.Wait(t, waitTimeout); r.Err != nil {
			t.Errorf("completion: %v", r.Err)
		}
	}
}

// TestAnswersStaged: the served side copies the small READ payloads of a
// batch of answers, with the headers before them, into one buffer of the
// writev; a larger one goes out from its region in place. The stream is
// the same: every answer carries its region's bytes.
func TestAnswersStaged(t *testing.T) {
	var mu sync.Mutex
	var lens [][]int
	hook := func(s *serverConn) {
		var l []int
		for _, b := range s.iov {
			l = append(l, len(b))
		}
		mu.Lock()
		lens = append(lens, l)
		mu.Unlock()
	}
	testHookGathered.Store(&hook)
	t.Cleanup(func() { testHookGathered.Store(nil) })
	p := newPair(t, Config{}, Config{})
	h, mem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	copy(mem, backendtest.RandomData(t, len(mem)))
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	reads := []struct {
		wrid   uint64
		off, n int
	}{{1, 0, 8}, {2, 100, 64}, {3, 1000, 1024}, {4, 3000, 8}}
	var msg []byte
	for _, r := range reads {
		msg = append(msg, reqBytes(reqHeader{op: opRead, length: uint32(r.n), wrid: r.wrid,
			region: h.Region, offset: uint64(r.off), key: h.Key})...)
	}
	writeRaw(t, c, msg) // one write: the server serves all four, then answers them in one batch
	for _, r := range reads {
		expectReadAnswer(t, c, r.wrid, mem[r.off:r.off+r.n])
	}
	mu.Lock()
	defer mu.Unlock()
	want := []int{2*respHeaderSize + 8 + 64, respHeaderSize, 1024, respHeaderSize + 8}
	if len(lens) != 1 || !slices.Equal(lens[0], want) {
		t.Errorf("batches' buffers %v, want one batch of %v", lens, want)
	}
}

// expectReadAnswer reads a READ's answer from c: wrid, OK, and want's
// bytes as its payload.
func expectReadAnswer(t *testing.T, c net.Conn, wrid uint64, want []byte) {
	t.Helper()
	resp := readResp(t, c)
	if resp.code != 0 || resp.wrid != wrid || int(resp.length) != len(want) {
		t.Fatalf("answer %+v, want wrid %d OK with %d bytes", resp, wrid, len(want))
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read payload: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("answer %d: payload differs from the region's bytes", wrid)
	}
}
