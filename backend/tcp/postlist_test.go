package tcp

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestPostList posts lists of Puts, then of Gets, of one chunk and of
// several (striped), on a route whose in-flight room is smaller than a
// list (PostList must queue what it built before it waits for room, or it
// waits on itself), and checks every byte; a list with an invalid work
// request at k posts k and leaves the rest untouched.
func TestPostList(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 2, ChunkSize: 4096, MaxInFlight: 8}, Config{})
	lp, ok := p.route.(backend.ListPoster)
	if !ok {
		t.Fatal("the tcp route is no backend.ListPoster")
	}
	const imm = 8 // wrs[imm] of the first list is a write-imm
	sizes := []int{64, 8, 5000, 64, 4096, 9000, 1, 64, 64, 64, 64, 64, 12288, 64, 64, 64, 64, 64, 64, 64}
	total := 0
	for _, n := range sizes {
		total += n
	}
	in := backendtest.NewInbox(p.regB, 4, 1)
	p.b.SetInbox(in)
	t.Cleanup(in.Close)
	remote, _ := backendtest.Alloc(t, p.regB, total, buffer.AccessReadWrite|buffer.AccessNotify)
	src := backendtest.RandomData(t, total)
	dst := make([]byte, total)
	list := func(op backend.Op, local []byte) ([]*backend.WorkRequest, *backendtest.Recorder) {
		rec := backendtest.NewRecorder(len(sizes))
		wrs := make([]*backend.WorkRequest, len(sizes))
		off := 0
		for i, n := range sizes {
			wrs[i] = &backend.WorkRequest{Op: op, Local: local[off : off+n], Remote: backendtest.Slice(t, remote, off, n),
				Deadline: time.Now().Add(waitTimeout), Done: rec}
			off += n
		}
		return wrs, rec
	}
	wait := func(rec *backendtest.Recorder, want int) {
		t.Helper()
		for range want {
			if res := rec.Wait(t, waitTimeout); res.Err != nil {
				t.Fatalf("%v of %d bytes: %v", res.WR.Op, len(res.WR.Local), res.Err)
			}
		}
		time.Sleep(time.Millisecond)
		rec.None(t)
	}
	for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		local := src
		if op == backend.OpRead {
			local = dst
		}
		wrs, rec := list(op, local)
		if op == backend.OpWrite {
			// a write-imm among them: it goes through queue, on the lane
			wrs[imm].Op, wrs[imm].Imm = backend.OpWriteImm, 77
		}
		if n, err := lp.PostList(wrs); n != len(wrs) || err != nil {
			t.Fatalf("PostList(%d %vs) = %d, %v", len(wrs), op, n, err)
		}
		wait(rec, len(wrs))
	}
	select {
	case ev := <-in.Events():
		if ev.Imm != 77 || ev.Length != uint64(sizes[imm]) {
			t.Fatalf("event %+v, want imm 77 over %d bytes", ev, sizes[imm])
		}
	case <-time.After(waitTimeout):
		t.Fatal("no event for the write-imm of the list")
	}
	if i := backendtest.FirstDiff(dst, src); i >= 0 {
		t.Fatalf("byte %d read back differs", i)
	}

	wrs, rec := list(backend.OpWrite, src)
	const k = 5
	wrs[k].Local = wrs[k].Local[:len(wrs[k].Local)-1] // local and remote lengths differ
	n, err := lp.PostList(wrs)
	if n != k || err == nil {
		t.Fatalf("PostList with wrs[%d] invalid = %d, %v; want %d and an error", k, n, err, k)
	}
	if !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Errorf("error %v, want ErrProtocol (the validation error)", err)
	}
	wait(rec, k)
	if !bytes.Equal(dst, src) {
		t.Fatal("dst changed")
	}
}
