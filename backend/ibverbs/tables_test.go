//go:build ibverbs

package ibverbs

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Tests of the in-flight tables that run without a device.

// TestTakeBatch: one poll's completions come out of the slot table under
// one lock, with their statuses; a stale id (its slot reused since) and
// control work are skipped, and a slot is never handed out twice.
func TestTakeBatch(t *testing.T) {
	var tab slotTable
	cs := make([]chunk, 4)
	ids := make([]uint64, len(cs))
	for i := range cs {
		ids[i] = tab.alloc(&cs[i])
	}
	stale := ids[3]
	if tab.take(stale) != &cs[3] {
		t.Fatal("take of a live id")
	}
	reused := tab.alloc(&cs[3]) // same slot, next generation
	if uint32(reused) != uint32(stale) || reused == stale {
		t.Fatalf("slot reuse: id %#x after %#x", reused, stale)
	}
	buf := newWCBuf(pollBatch)
	buf.set(0, wc{wrID: ids[1], status: wcSuccess})
	buf.set(1, wc{wrID: ctlBit | 5, status: wcSuccess})
	buf.set(2, wc{wrID: stale, status: wcSuccess})
	buf.set(3, wc{wrID: ids[0], status: wcRemAccessErr, vendorErr: 9})
	buf.set(4, wc{wrID: ids[1], status: wcSuccess}) // a duplicate: already taken
	ds := tab.takeBatch(buf, 5, nil)
	if len(ds) != 2 || ds[0].c != &cs[1] || ds[0].status != wcSuccess || ds[1].c != &cs[0] ||
		ds[1].status != wcRemAccessErr || ds[1].vendor != 9 {
		t.Fatalf("takeBatch = %+v", ds)
	}
	if tab.take(reused) != &cs[3] || tab.take(ids[2]) != &cs[2] {
		t.Fatal("the slots left are not intact")
	}
	if tab.busy() {
		t.Fatal("busy with every slot taken")
	}
}

// TestOpTable: ops enter and leave by index (no map); each sees exactly
// the ones in; a freed index is reused.
func TestOpTable(t *testing.T) {
	var tab opTable
	tab.init(4)
	ops := make([]*op, 6)
	for i := range ops {
		ops[i] = &op{seq: uint32(i), wr: new(backend.WorkRequest)}
	}
	tab.add(ops[:4])
	tab.remove(ops[1])
	tab.remove(ops[1]) // twice: no effect
	tab.add(ops[4:])
	if ops[4].idx != ops[1].idx {
		t.Errorf("freed index %d not reused (got %d)", ops[1].idx, ops[4].idx)
	}
	var seen []uint32
	tab.each(func(o *op) { seen = append(seen, o.seq) })
	want := map[uint32]bool{0: true, 2: true, 3: true, 4: true, 5: true}
	if len(seen) != len(want) {
		t.Fatalf("each saw %v", seen)
	}
	for _, s := range seen {
		if !want[s] {
			t.Fatalf("each saw %v", seen)
		}
	}
}

// TestOpTableNoAllocs: entering and leaving the table costs no
// allocation once it has grown.
func TestOpTableNoAllocs(t *testing.T) {
	var tab opTable
	tab.init(8)
	ops := []*op{{wr: new(backend.WorkRequest)}, {wr: new(backend.WorkRequest)}, {wr: new(backend.WorkRequest)}}
	if n := testing.AllocsPerRun(100, func() {
		tab.add(ops)
		for _, o := range ops {
			tab.remove(o)
		}
	}); n != 0 {
		t.Errorf("%v allocations per add/remove round", n)
	}
}

// TestOpTableMarksCancelled: an op whose request was cancelled while it
// was being posted (the cause set, its canceller's scan done before the
// op entered the table) is marked cancelled as it enters, with its cause;
// the others are not. Posting carries out no cancel later (chain.go).
func TestOpTableMarksCancelled(t *testing.T) {
	var tab opTable
	tab.init(2)
	cause := errors.New("cancelled while posted")
	ops := []*op{{wr: &backend.WorkRequest{Op: backend.OpRead}}, {wr: &backend.WorkRequest{Op: backend.OpRead}}}
	ops[1].wr.RequestCancel(cause)
	tab.add(ops)
	if p := ops[0].canceled.Load(); p != nil {
		t.Errorf("op not cancelled marked with %v", *p)
	}
	if p := ops[1].canceled.Load(); p == nil || !errors.Is(*p, cause) {
		t.Errorf("cancelled op marked %v, want its cause", p)
	}
}
