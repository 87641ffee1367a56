package actor

import (
	"context"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// TestPoolAndCacheMetrics checks that the registry's slab memory and
// registration cache counters reach the manager's collector.
func TestPoolAndCacheMetrics(t *testing.T) {
	ctx := testCtx(t)
	sys := newSystem(t)
	m := startManager(t, sys, Config{Name: "pool"})
	b := requestBuf(t, ctx, m.Client(), 4096, buffer.AccessReadWrite)
	p := make([]byte, 100)
	for range 3 {
		h, err := m.Client().RequestBuffer(ctx, uint64(len(p)), buffer.AccessRead, WithMemory(p))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Client().ReleaseBuffer(context.Background(), h)
	}
	got := gauges(t, m, "rdmamgr_pool_slab_bytes", "rdmamgr_registration_cache_hits_total", "rdmamgr_registration_cache_misses_total")
	if got[0] != memreg.SlabSize || got[1] != 2 || got[2] != 1 {
		t.Errorf("slab bytes, cache hits, misses = %v, want [%d 2 1]", got, memreg.SlabSize)
	}
	if err := m.Client().ReleaseBuffer(ctx, b); err != nil {
		t.Fatal(err)
	}
}

// gauges returns the value of the single series of each named metric of
// m's collector (counter or gauge).
func gauges(t *testing.T, m *Manager, names ...string) []float64 {
	t.Helper()
	mfs, err := registry(t, m, NewMetrics()).Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(names))
	for i, n := range names {
		found := false
		for _, mf := range mfs {
			if mf.GetName() == n && len(mf.GetMetric()) == 1 {
				mt := mf.GetMetric()[0]
				out[i] = mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
				found = true
			}
		}
		if !found {
			t.Errorf("no single series %s", n)
		}
	}
	return out
}
