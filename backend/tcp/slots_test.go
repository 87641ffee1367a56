package tcp

import "testing"

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
