package tcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// The fence (fence.go) seen by a fake server that holds a Put's answer:
// a notice posted behind it is held (nothing of it reaches the server);
// held, it completes exactly once on a cancel, at its deadline, and when
// the route closes; a failed Put still lets the notice behind it go.
func TestFenceHeldNotices(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA) // one connection
	rt := f.connect(t, a)
	sc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	rec := backendtest.NewRecorder(8)
	post := func(wr *backend.WorkRequest) *backend.WorkRequest {
		t.Helper()
		wr.Done = rec
		if wr.Deadline.IsZero() {
			wr.Deadline = time.Now().Add(waitTimeout)
		}
		if err := rt.Post(wr); err != nil {
			t.Fatalf("post %s: %v", wr.Op, err)
		}
		return wr
	}
	next := func(want *backend.WorkRequest, wantErr error) {
		t.Helper()
		res := rec.Wait(t, waitTimeout)
		if res.WR != want {
			t.Fatalf("completion of %s (imm %d), want %s (imm %d)", res.WR.Op, res.WR.Imm, want.Op, want.Imm)
		}
		if (wantErr == nil) != (res.Err == nil) || (wantErr != nil && !errors.Is(res.Err, wantErr)) {
			t.Fatalf("%s (imm %d) completed with %v, want %v", want.Op, want.Imm, res.Err, wantErr)
		}
	}
	readReq := func() reqHeader {
		t.Helper()
		h := sc.readReq(t)
		for h.op == opPing {
			sc.respond(t, respHeader{op: opPing, wrid: h.wrid}, nil)
			h = sc.readReq(t)
		}
		return h
	}
	remote, wiRemote := fakeRemote(8), fakeRemote(32)
	notice := func(op backend.Op, imm uint32) *backend.WorkRequest {
		wr := &backend.WorkRequest{Op: op, Local: local[8:40], Imm: imm, HasImm: true}
		if op == backend.OpWriteImm {
			wr.Remote = wiRemote
		}
		return wr
	}

	put := post(&backend.WorkRequest{Op: backend.OpWrite, Local: local[:8], Remote: remote})
	hp := readReq()
	sc.readPayload(t, 8) // and no answer yet

	n1 := post(notice(backend.OpWriteImm, 1))
	n1.RequestCancel(context.Canceled)
	rt.Cancel(n1)
	next(n1, context.Canceled)

	n2 := notice(backend.OpSend, 2)
	n2.Deadline = time.Now().Add(50 * time.Millisecond)
	post(n2)
	next(n2, rdmamgr.ErrDeadline)

	n3 := post(notice(backend.OpWriteImm, 3))
	n4 := post(notice(backend.OpSend, 4)) // behind n3, no Put between
	sc.respond(t, respHeader{op: opWrite, code: byte(backend.Code(rdmamgr.ErrBadKey)), wrid: hp.wrid}, nil)
	next(put, rdmamgr.ErrBadKey)
	// n1 and n2 never reached the server: the next frames are n3, n4.
	for _, w := range []*backend.WorkRequest{n3, n4} {
		h := readReq()
		if h.op != wireOp(w.Op) || h.imm != w.Imm {
			t.Fatalf("frame %+v, want the %s of imm %d", h, w.Op, w.Imm)
		}
		sc.readPayload(t, int(h.length)+trailerSize)
		sc.respond(t, respHeader{op: h.op, wrid: h.wrid}, nil)
		next(w, nil)
	}

	put2 := post(&backend.WorkRequest{Op: backend.OpWrite, Local: local[:8], Remote: remote})
	readReq()
	n5 := post(notice(backend.OpWriteImm, 5))
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res := rec.Wait(t, waitTimeout)
		if (res.WR != put2 && res.WR != n5) || !errors.Is(res.Err, rdmamgr.ErrClosed) {
			t.Fatalf("after Close: %s completed with %v", res.WR.Op, res.Err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	rec.None(t) // each exactly once
}

// TestFenceOrderManyConns: with many connections and small chunks, a
// notice after a burst of Puts comes after all of them (the conformance
// case OrderAfterPuts covers sizes; this one the fence's bookkeeping
// under many epochs): notices in flight together keep their order.
func TestFenceOrderManyConns(t *testing.T) {
	cfg := Config{ChunkSize: 4096, ConnsPerRoute: 4}
	p := newPair(t, cfg, cfg)
	in := backendtest.NewInbox(p.regB, 64, 1)
	p.b.SetInbox(in)
	rt := p.newRoute(t)
	const rounds, puts, size = 4, 16, 3*4096 + 5
	ha, la := backendtest.Alloc(t, p.regA, puts*size, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, p.regB, puts*size, buffer.AccessReadWrite|buffer.AccessNotify)
	backendtest.Random(t, lb)
	want := 0
	in.SetCheck(func(ev backend.Event) error {
		if int(ev.Imm) != want {
			return errors.New("event out of posting order")
		}
		want++
		k := int(ev.Imm) % puts // every Put of the round up to k has landed
		if i := backendtest.FirstDiff(lb[:(k+1)*size], la[:(k+1)*size]); i >= 0 {
			return errors.New("event before the bytes of an earlier Put")
		}
		return nil
	})
	rec := backendtest.NewRecorder(2 * puts)
	for r := range rounds {
		backendtest.Random(t, la)
		var releases []func()
		for i := range puts {
			deadline := time.Now().Add(waitTimeout)
			slice := func(h buffer.Buffer) buffer.Buffer { return backendtest.Slice(t, h, i*size, size) }
			wr, rel := backendtest.NewWR(t, p.regA, backend.OpWrite, slice(ha), slice(hb), deadline, rec)
			releases = append(releases, rel)
			if err := rt.Post(wr); err != nil {
				t.Fatal(err)
			}
			// A notice on the Put's first byte, imm r*puts+i.
			wi, rel := backendtest.VerbWR(t, p.regA, backend.OpWriteImm, backendtest.Slice(t, ha, i*size, 1), backendtest.Slice(t, hb, i*size, 1),
				backendtest.Operands{Imm: uint32(r*puts + i)}, deadline, rec)
			releases = append(releases, rel)
			if err := rt.Post(wi); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 * puts {
			if res := rec.Wait(t, waitTimeout); res.Err != nil {
				t.Fatalf("%s: %v", res.WR.Op, res.Err)
			}
		}
		for _, rel := range releases {
			rel()
		}
		for range puts {
			select {
			case <-in.Events():
			case <-time.After(waitTimeout):
				t.Fatal("no event")
			}
		}
	}
	if err := in.Fault(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFenceHooks is the fence's cost on a Put's path: the hooks
// Post and the completion call (fenceHold, fenceCount, fenceDone), with
// no notice held; Parallel has every P posting and completing at once.
func BenchmarkFenceHooks(b *testing.B) {
	newOpW := func() *op { return &op{wr: &backend.WorkRequest{Op: backend.OpWrite}} }
	b.Run("Serial", func(b *testing.B) {
		r, o := &route{}, newOpW()
		b.ReportAllocs()
		for b.Loop() {
			r.fenceHold(o)
			r.fenceCount(o)
			r.fenceDone(o)
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		r := &route{}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			o := newOpW()
			for pb.Next() {
				r.fenceHold(o)
				r.fenceCount(o)
				r.fenceDone(o)
			}
		})
	})
}

// TestFenceOrderLists: as TestFenceOrderManyConns, but each round posts
// one list (PostList) of small Puts ending in a notice on the last Put's
// first byte, so the Puts are spread over the connections (postlist.go)
// and counted by the fence as one chain (fenceCountChain), and their
// answers come back in batches (fenceDoneAll): the event must still come
// after every Put of its list has landed.
func TestFenceOrderLists(t *testing.T) {
	cfg := Config{ConnsPerRoute: 2}
	p := newPair(t, cfg, cfg)
	in := backendtest.NewInbox(p.regB, 64, 1)
	p.b.SetInbox(in)
	rt := p.newRoute(t)
	lp := rt.(backend.ListPoster)
	const rounds, puts, size = 20, 3 * minListShare, 256
	ha, la := backendtest.Alloc(t, p.regA, puts*size, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, p.regB, puts*size, buffer.AccessReadWrite|buffer.AccessNotify)
	want := 0
	in.SetCheck(func(ev backend.Event) error {
		if int(ev.Imm) != want {
			return errors.New("event out of posting order")
		}
		want++
		if i := backendtest.FirstDiff(lb, la); i >= 0 {
			return errors.New("event before the bytes of a Put of its list")
		}
		return nil
	})
	for r := range rounds {
		backendtest.Random(t, la)
		rec := backendtest.NewRecorder(puts + 1)
		deadline := time.Now().Add(waitTimeout)
		wrs := make([]*backend.WorkRequest, 0, puts+1)
		var releases []func()
		for i := range puts {
			slice := func(h buffer.Buffer) buffer.Buffer { return backendtest.Slice(t, h, i*size, size) }
			wr, rel := backendtest.NewWR(t, p.regA, backend.OpWrite, slice(ha), slice(hb), deadline, rec)
			wrs, releases = append(wrs, wr), append(releases, rel)
		}
		last := (puts - 1) * size
		wi, rel := backendtest.VerbWR(t, p.regA, backend.OpWriteImm, backendtest.Slice(t, ha, last, 1), backendtest.Slice(t, hb, last, 1),
			backendtest.Operands{Imm: uint32(r)}, deadline, rec)
		wrs, releases = append(wrs, wi), append(releases, rel)
		if n, err := lp.PostList(wrs); n != len(wrs) || err != nil {
			t.Fatalf("PostList = %d, %v", n, err)
		}
		for range len(wrs) {
			if res := rec.Wait(t, waitTimeout); res.Err != nil {
				t.Fatalf("%s: %v", res.WR.Op, res.Err)
			}
		}
		select {
		case <-in.Events():
		case <-time.After(waitTimeout):
			t.Fatal("no event")
		}
		for _, rel := range releases {
			rel()
		}
	}
	if err := in.Fault(); err != nil {
		t.Fatal(err)
	}
}
