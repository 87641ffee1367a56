package tcp

import (
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestSlotTableGeneration: an id whose slot was freed and taken again
// finds nothing, so a late or forged answer cannot complete the chunk that
// holds the slot now; ids never handed out find nothing either.
func TestSlotTableGeneration(t *testing.T) {
	var tab slotTable
	a, b := new(chunk), new(chunk)
	idA := tab.put(a)
	if got := tab.get(idA); got != a {
		t.Fatalf("get(%#x) = %p, want a", idA, got)
	}
	tab.del(idA)
	idB := tab.put(b)
	if uint32(idB) != uint32(idA) {
		t.Fatalf("slot not reused: %#x after %#x", idB, idA)
	}
	if idB == idA {
		t.Fatalf("reused slot kept its generation: %#x", idB)
	}
	if got := tab.get(idA); got != nil {
		t.Fatalf("stale id %#x found %p, want nothing", idA, got)
	}
	tab.del(idA) // a stale id frees nothing
	if got := tab.get(idB); got != b {
		t.Fatalf("get(%#x) = %p after a stale del, want b", idB, got)
	}
	for _, id := range []uint64{0, 1, 1<<32 | 7, ^uint64(0)} {
		if got := tab.get(id); got != nil {
			t.Fatalf("id %#x never handed out found %p", id, got)
		}
	}
	if idA>>32 == 0 || idB>>32 == 0 {
		t.Fatalf("generation 0 handed out: %#x %#x", idA, idB)
	}
}

// TestStaleGenerationAnswer: an answer naming the id of an operation that
// completed, whose slot the next operation now holds under a new
// generation, is a protocol violation: the route fails and the operation
// holding the slot fails with it rather than completing with the stale
// answer (an index by slot alone would complete it: it passes on the old
// map too, which never reused ids; it guards the slot table).
func TestStaleGenerationAnswer(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 100, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(2)
	post := func() (*backend.WorkRequest, reqHeader) {
		wr := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(100),
			Deadline: time.Now().Add(waitTimeout), Done: rec}
		if err := rt.Post(wr); err != nil {
			t.Fatalf("post: %v", err)
		}
		h := sc.readReq(t)
		sc.readPayload(t, int(h.length))
		return wr, h
	}
	first, h1 := post()
	sc.respond(t, respHeader{op: opWrite, wrid: h1.wrid}, nil)
	if res := rec.Wait(t, waitTimeout); res.WR != first || res.Err != nil {
		t.Fatalf("first write: %v", res.Err)
	}
	second, h2 := post()
	if uint32(h2.wrid) != uint32(h1.wrid) || h2.wrid == h1.wrid {
		t.Fatalf("ids %#x then %#x: want the slot reused under a new generation", h1.wrid, h2.wrid)
	}
	sc.respond(t, respHeader{op: opWrite, wrid: h1.wrid}, nil) // stale
	res := rec.Wait(t, waitTimeout)
	if res.WR != second || !errors.Is(res.Err, rdmamgr.ErrProtocol) {
		t.Fatalf("second write after a stale answer: %v, want ErrProtocol", res.Err)
	}
	select {
	case <-rt.Done():
	case <-time.After(waitTimeout):
		t.Fatal("route still up after a stale answer")
	}
	rec.None(t)
}
