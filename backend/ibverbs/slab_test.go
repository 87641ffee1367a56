//go:build ibverbs

package ibverbs

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// TestPooledRegionsShareSlabMR checks the slab registration: two pooled
// regions of one slab share its local memory region, each has a remote one
// over exactly its slot (a forged handle that points the first one's rkey
// at its neighbour fails at the device), and the slab's registration goes
// when the registry unmaps the slab.
func TestPooledRegionsShareSlabMR(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := newStarted(t, DefaultConfig(), 2)
	t.Cleanup(func() { b.Close() })
	rt := connect(t, a, b)
	hx, lx := backendtest.Alloc(t, regB, 4096, buffer.AccessReadWrite)
	hy, ly := backendtest.Alloc(t, regB, 4096, buffer.AccessReadWrite)
	rx, ry := regionOf(t, regB, hx), regionOf(t, regB, hy)
	if rx.Slab() == nil || rx.Slab() != ry.Slab() {
		t.Fatal("two 4 KiB buffers not carved from one slab")
	}
	dx, dy := rx.BackendData.(*regData), ry.BackendData.(*regData)
	if !dx.shared || dx.local != dy.local || dx.remote.rkey == dy.remote.rkey {
		t.Fatalf("local MRs %p %p (shared %v), rkeys %#x %#x", dx.local, dy.local, dx.shared, dx.remote.rkey, dy.remote.rkey)
	}
	la, _ := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, lx)
	backendtest.Random(t, ly)
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpRead, la, hx); err != nil {
		t.Fatalf("get of a pooled buffer: %v", err)
	}
	forged := hx
	forged.RDMA.Addr = hy.RDMA.Addr // x's rkey, y's bytes
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpRead, la, forged); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("get of the neighbour slot with x's rkey: %v, want rdmamgr.ErrAccess", err)
	}
	for _, h := range []buffer.Buffer{hx, hy} {
		if err := regB.Release(context.Background(), h); err != nil {
			t.Fatal(err)
		}
	}
	if n := slabMRs(b); n != 1 {
		t.Fatalf("%d slab MRs with the slab kept as a spare, want 1", n)
	}
	if err := regB.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := slabMRs(b); n != 0 {
		t.Fatalf("%d slab MRs after the registry unmapped its slabs", n)
	}
}

func regionOf(t *testing.T, reg *memreg.Registry, h buffer.Buffer) *memreg.Region {
	t.Helper()
	ref, err := reg.AcquireLocal(h)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	return ref.Region()
}

func slabMRs(b *Backend) int {
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	return len(b.slabs)
}
