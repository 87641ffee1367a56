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

// TestPostListSpread: PostList puts a list on the least loaded connection
// (the fewest chunks in flight), and spreads a list of 2×minListShare or
// more to even the loads, never in shares under minListShare (so the peer
// serves one share while the next is on its way, and a re-posted share
// goes back where its answers came from: bench/OPRATE.md, twentieth
// session). The fake server answers nothing, so the loads are exact.
// Before, a whole list went to one connection, round-robin.
func TestPostListSpread(t *testing.T) {
	f := newFakeServer(t)
	cfg := fastWatchdog()
	cfg.ConnsPerRoute, cfg.MaxInFlight = 2, 4096
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a)
	f.accept(t)
	f.accept(t)
	lp := rt.(backend.ListPoster)
	conns := rt.(*route).conns
	_, local := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	loads := func() [2]int {
		return [2]int{int(conns[0].slots.held.Load()), int(conns[1].slots.held.Load())}
	}
	rec := backendtest.NewRecorder(4096)
	for _, tc := range []struct {
		n    int
		want [2]int // the loads after, least loaded first
	}{
		{64, [2]int{32, 32}},                 // spread evenly
		{2*minListShare - 1, [2]int{32, 63}}, // too short to spread: whole
		{2 * minListShare, [2]int{63, 64}},   // its even share is all of it
		{100, [2]int{113, 114}},              // 51 and 49
		{40, [2]int{133, 134}},               // 21, then 19 whole
		{minListShare + 1, [2]int{134, 150}}, // whole, to the least loaded
	} {
		wrs := make([]*backend.WorkRequest, tc.n)
		for i := range wrs {
			wrs[i] = &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(64),
				Deadline: time.Now().Add(time.Hour), Done: rec}
		}
		before := loads()
		if k, err := lp.PostList(wrs); k != tc.n || err != nil {
			t.Fatalf("PostList(%d) = %d, %v", tc.n, k, err)
		}
		got := loads()
		if got[0] > got[1] {
			got[0], got[1] = got[1], got[0]
		}
		if got != tc.want {
			t.Errorf("a list of %d on loads %v: loads %v, want %v", tc.n, before, got, tc.want)
		}
	}
}

// TestPostListCounts: PostList takes room in flight and the count of
// operations posted for the whole list at once and gives back what its
// operations did not use: after a list with an operation of several
// chunks, and one cut short by a refused operation, the room taken is
// the chunks posted and the count in flight the operations posted. The
// fake server answers nothing, so both are exact.
func TestPostListCounts(t *testing.T) {
	f := newFakeServer(t)
	cfg := fastWatchdog()
	cfg.ConnsPerRoute, cfg.MaxInFlight, cfg.ChunkSize = 2, 64, 4096
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a)
	f.accept(t)
	f.accept(t)
	r := rt.(*route)
	lp := rt.(backend.ListPoster)
	_, small := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	_, big := backendtest.Alloc(t, regA, 3*4096, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(64)
	wr := func(local []byte) *backend.WorkRequest {
		return &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(uint64(len(local))),
			Deadline: time.Now().Add(time.Hour), Done: rec}
	}
	check := func(what string, room, inflight int) {
		t.Helper()
		if got := r.sem.n.Load(); got != int64(room) {
			t.Errorf("%s: room taken %d, want %d", what, got, room)
		}
		if got := r.InFlight(); got != int64(inflight) {
			t.Errorf("%s: in flight %d, want %d", what, got, inflight)
		}
	}
	list := []*backend.WorkRequest{wr(small), wr(big), wr(small), wr(small)}
	if k, err := lp.PostList(list); k != 4 || err != nil {
		t.Fatalf("PostList = %d, %v", k, err)
	}
	check("a list of 4, one of 3 chunks", 6, 4)
	bad := wr(small)
	bad.Remote.Length = 32 // not the local length: refused
	list = []*backend.WorkRequest{wr(small), wr(small), bad, wr(small)}
	if k, err := lp.PostList(list); k != 2 || err == nil {
		t.Fatalf("PostList with a refused third = %d, %v; want 2 and an error", k, err)
	}
	check("then a list cut short after 2", 8, 6)
	// Refused from its first operation: nothing counted at any time, so
	// an idle route stays idle to a poster beside it (which then wakes
	// the watchdog itself).
	if k, err := lp.PostList([]*backend.WorkRequest{bad, wr(small)}); k != 0 || err == nil {
		t.Fatalf("PostList with a refused first = %d, %v; want 0 and an error", k, err)
	}
	check("then a list refused from its first", 8, 6)
	// More than the room left (56) in one list: taken one by one, as
	// far as the room goes; the last waits for room until its deadline.
	list = list[:0]
	for range 57 {
		list = append(list, wr(small))
	}
	list[56].Deadline = time.Now().Add(50 * time.Millisecond)
	if k, err := lp.PostList(list); k != 56 || !errors.Is(err, rdmamgr.ErrDeadline) {
		t.Fatalf("PostList of 57 with room for 56 = %d, %v; want 56 and ErrDeadline", k, err)
	}
	check("then a list past the room", 64, 62)
}
