package tcp

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// A cancel that comes while a post is being queued is carried out late:
// by the poster once the chunks are queued (posted), or by the fence's
// releaser once it queued a held notice. By then the operation may have
// completed and its (reusable) WorkRequest been posted again; the late
// cancel must leave that new post alone: it completes with its own
// outcome (one operation's failure never fails another). The hooks hold
// the late cancel while the first post is answered and the request is
// posted again: a Get through posted, a Send through the releaser (the
// new Send is then held behind the releaser's batch, where the fence's
// cancel looks too).
func TestLateCancelSparesTheRepost(t *testing.T) {
	for _, notice := range []bool{false, true} {
		name := map[bool]string{false: "get", true: "send"}[notice]
		t.Run(name, func(t *testing.T) { testLateCancelSparesTheRepost(t, notice) })
	}
}

func testLateCancelSparesTheRepost(t *testing.T, notice bool) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA) // one connection
	rt := f.connect(t, a)
	sc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 16, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(4)
	readReq := func() reqHeader {
		t.Helper()
		h := sc.readReq(t)
		for h.op == opPing {
			sc.respond(t, respHeader{op: opPing, wrid: h.wrid}, nil)
			h = sc.readReq(t)
		}
		return h
	}
	wr := &backend.WorkRequest{}
	arm := func() {
		wr.Reset()
		wr.Local, wr.Done, wr.Deadline = local[8:16], rec, time.Now().Add(waitTimeout)
		if notice {
			wr.Op = backend.OpSend
		} else {
			wr.Op, wr.Remote = backend.OpRead, fakeRemote(8)
		}
	}
	// answer reads the request of wr's post and answers it with data.
	answer := func(data []byte) {
		t.Helper()
		h := readReq()
		if h.op != wireOp(wr.Op) {
			t.Fatalf("request %+v, want the %s", h, wr.Op)
		}
		if notice {
			sc.readPayload(t, int(h.length)+trailerSize)
			sc.respond(t, respHeader{op: h.op, wrid: h.wrid}, nil)
		} else {
			sc.respond(t, respHeader{op: h.op, length: uint32(len(data)), wrid: h.wrid}, data)
		}
	}
	first := errors.New("the first post's cancel")
	var put *backend.WorkRequest
	var hp reqHeader
	if notice { // a Put in flight: the Send is held behind it
		put = &backend.WorkRequest{Op: backend.OpWrite, Local: local[:8], Remote: fakeRemote(8),
			Deadline: time.Now().Add(waitTimeout), Done: rec}
		if err := rt.Post(put); err != nil {
			t.Fatal(err)
		}
		hp = readReq()
		sc.readPayload(t, 8)
		arm()
		if err := rt.Post(wr); err != nil {
			t.Fatal(err)
		}
	}

	late, goOn := make(chan struct{}), make(chan struct{})
	queued := false
	testHookQueued = func(w *backend.WorkRequest) {
		if w == wr && !queued { // the first post: a cancel comes as it is queued
			queued = true
			w.RequestCancel(first)
		}
	}
	lateOnce := false
	testHookLateCancel = func() {
		if queued && !lateOnce {
			lateOnce = true
			close(late)
			<-goOn
		}
	}
	t.Cleanup(func() { testHookQueued, testHookLateCancel = nil, nil })

	posted := make(chan error, 1)
	if notice {
		sc.respond(t, respHeader{op: opWrite, wrid: hp.wrid}, nil) // releases the Send
		if res := rec.Wait(t, waitTimeout); res.WR != put || res.Err != nil {
			t.Fatalf("put: %v", res.Err)
		}
	} else {
		arm()
		go func() { posted <- rt.Post(wr) }()
	}
	// A late cancel (Cancel called after the chunks were queued, as the
	// poster and the releaser did) is held in its window; none is made
	// once the poster returned or the releaser is idle.
	deadline := time.Now().Add(waitTimeout)
wait:
	for {
		select {
		case <-late:
			break wait
		case err := <-posted:
			if err != nil {
				t.Fatal(err)
			}
			posted <- nil
			break wait
		case <-time.After(time.Millisecond):
			if notice && releaserIdle(rt) {
				break wait
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the post never ended")
		}
	}
	// The first post is answered before the late cancel acts: it
	// completes (its bytes landed before the cancel took effect).
	answer(bytes.Repeat([]byte{1}, 8))
	if res := rec.Wait(t, waitTimeout); res.WR != wr {
		t.Fatal("another request completed")
	}
	// Its owner posts wr again; then the late cancel of the first post runs.
	arm()
	if err := rt.Post(wr); err != nil {
		t.Fatal(err)
	}
	if !notice {
		readReq2 := readReq() // in flight, awaiting its answer
		close(goOn)
		if err := <-posted; err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte{2}, 8)
		sc.respond(t, respHeader{op: readReq2.op, length: 8, wrid: readReq2.wrid}, want)
		if res := rec.Wait(t, waitTimeout); res.WR != wr || res.Err != nil {
			t.Fatalf("the new post completed with %v, want nil (the old post's late cancel failed it)", res.Err)
		}
		backendtest.AssertSame(t, "the new post's Get", local[8:16], want)
	} else {
		close(goOn) // the new Send is held behind the releaser's batch
		for !releaserIdle(rt) {
			if time.Now().After(deadline) {
				t.Fatal("the releaser never went idle")
			}
			time.Sleep(time.Millisecond)
		}
		if rec.Len() > 0 { // it never reached the server
			res := rec.Wait(t, waitTimeout)
			t.Fatalf("the new post completed with %v before it was answered (the old post's late cancel failed it)", res.Err)
		}
		answer(nil)
		if res := rec.Wait(t, waitTimeout); res.WR != wr || res.Err != nil {
			t.Fatalf("the new post completed with %v, want nil (the old post's late cancel failed it)", res.Err)
		}
	}
	rec.None(t)
	assertUp(t, rt)
}

// releaserIdle reports whether rt's fence releaser has nothing to queue
// and is not queueing.
func releaserIdle(rt backend.Route) bool {
	f := &rt.(*route).fence
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started && !f.busy && len(f.ready) == 0
}

// A request whose cancel came before its chunks were queued (the cause is
// set; its canceller's scan found nothing) is ended as it is queued, with
// its cause, and nothing of it reaches the server: through Post, in the
// middle of a PostList chain, and as a notice that would be held behind a
// Put (it is not held).
func TestCancelBeforeQueueing(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA) // one connection
	rt := f.connect(t, a)
	sc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(8)
	cause := errors.New("cancelled while posted")
	get := func(i int, cancelled bool) *backend.WorkRequest {
		wr := &backend.WorkRequest{Op: backend.OpRead, Local: local[8*i : 8*i+8], Remote: fakeRemote(8),
			Deadline: time.Now().Add(waitTimeout), Done: rec, Imm: uint32(i)}
		if cancelled {
			wr.RequestCancel(cause)
		}
		return wr
	}
	expect := func(want *backend.WorkRequest, wantErr error) {
		t.Helper()
		res := rec.Wait(t, waitTimeout)
		if res.WR != want || !errors.Is(res.Err, wantErr) && !(wantErr == nil && res.Err == nil) {
			t.Fatalf("completion %d: %v, want %d: %v", res.WR.Imm, res.Err, want.Imm, wantErr)
		}
	}
	serve := func(want *backend.WorkRequest) {
		t.Helper()
		h := sc.readReq(t)
		for h.op == opPing {
			sc.respond(t, respHeader{op: opPing, wrid: h.wrid}, nil)
			h = sc.readReq(t)
		}
		if h.op != wireOp(want.Op) {
			t.Fatalf("request %+v, want the %s", h, want.Op)
		}
		if h.op == opRead {
			sc.respond(t, respHeader{op: h.op, length: 8, wrid: h.wrid}, make([]byte, 8))
		} else {
			sc.readPayload(t, int(h.length))
			sc.respond(t, respHeader{op: h.op, wrid: h.wrid}, nil)
		}
		expect(want, nil)
	}

	c0 := get(0, true)
	if err := rt.Post(c0); err != nil {
		t.Fatal(err)
	}
	expect(c0, cause)
	ok1 := get(1, false)
	if err := rt.Post(ok1); err != nil {
		t.Fatal(err)
	}
	serve(ok1) // the first request the server sees

	list := []*backend.WorkRequest{get(2, false), get(3, true), get(4, false)}
	if n, err := rt.(backend.ListPoster).PostList(list); n != 3 || err != nil {
		t.Fatalf("PostList: %d, %v", n, err)
	}
	expect(list[1], cause)
	serve(list[0])
	serve(list[2])

	put := &backend.WorkRequest{Op: backend.OpWrite, Local: local[40:48], Remote: fakeRemote(8),
		Deadline: time.Now().Add(waitTimeout), Done: rec, Imm: 5}
	if err := rt.Post(put); err != nil {
		t.Fatal(err)
	}
	send := &backend.WorkRequest{Op: backend.OpSend, Local: local[48:56], Deadline: time.Now().Add(waitTimeout),
		Done: rec, Imm: 6, HasImm: true}
	send.RequestCancel(cause)
	if err := rt.Post(send); err != nil {
		t.Fatal(err)
	}
	expect(send, cause) // at once: not held behind the Put
	serve(put)
	rec.None(t)
	assertUp(t, rt)
}
