package memreg

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// A LocalRun over a proxy region enters the gate once for each Ref it
// hands out (Next and the spare references must not skip it), a run
// started near a proxy whose owner has cut it is refused by the gate, and
// ReleaseAll leaves the gate once for each Ref, as Release does.
func TestLocalRunProxyGate(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	gate := &fakeGate{}
	h := mustProxy(t, g, make([]byte, 4096), buffer.AccessReadWrite, gate)
	r := g.regionOf(t, h)
	s := func(off uint64) *buffer.Buffer {
		b, err := h.Slice(off, 8)
		if err != nil {
			t.Fatal(err)
		}
		return &b
	}
	lr := g.NewLocalRun(nil)
	refs := make([]Ref, 3)
	var err error
	if refs[0], err = lr.Acquire(s(0), 3); err != nil {
		t.Fatal(err)
	}
	if _, ok := lr.Next(s(8), &refs[1]); !ok {
		if refs[1], err = lr.Acquire(s(8), 2); err != nil {
			t.Fatal(err)
		}
	}
	if refs[2], err = lr.Acquire(s(16), 1); err != nil {
		t.Fatal(err)
	}
	lr.Close()
	if got := gate.in.Load(); got != 3 {
		t.Errorf("gate holds %d users for 3 Refs of the proxy", got)
	}
	ReleaseAll(refs)
	if got := gate.in.Load(); got != 0 || r.Refs() != 0 {
		t.Errorf("after ReleaseAll: gate holds %d users, region %d references, want 0, 0", got, r.Refs())
	}

	gate.setRefuse(rdmamgr.ErrRevoked) // the owner's cut
	lr = g.NewLocalRun(r)
	ref, err := lr.Acquire(s(0), 2)
	if !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Errorf("a run near a cut proxy: %v, want ErrRevoked", err)
	}
	ref.Release()
	lr.Close()
	if r.Refs() != 0 {
		t.Fatalf("region holds %d references after a refused acquire", r.Refs())
	}
}
