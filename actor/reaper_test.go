package actor

import (
	"context"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// TestLeaseReaperNotSerialised (issue 24, row 5): expired buffers whose
// release waits (a peer's request stuck in each) do not hold up the
// expiry of another: each is released on its own. Before, the one reaper
// waited OpTimeout (30 s) per stuck buffer in turn.
func TestLeaseReaperNotSerialised(t *testing.T) {
	a, b := leaseEnv(t, Config{ReapInterval: 20 * time.Millisecond, OpTimeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner := NewClient(a.sys, b.PID())
	var stuck []memreg.Ref
	defer func() {
		for i := range stuck {
			stuck[i].Release()
		}
	}()
	for range 3 {
		h, err := owner.RequestLeasedBuffer(ctx, 4096, buffer.AccessReadWrite, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := b.reg.AcquireRemote(h.Region, h.Key, 0, 1, buffer.AccessRead)
		if err != nil {
			t.Fatal(err)
		}
		stuck = append(stuck, ref) // a request that never ends
	}
	time.Sleep(200 * time.Millisecond) // the reaper has taken the stuck ones
	h, err := owner.RequestLeasedBuffer(ctx, 4096, buffer.AccessReadWrite, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		if _, err := b.reg.Bytes(h); err != nil {
			break // released
		}
		if ctx.Err() != nil {
			t.Fatalf("a buffer's lease took no effect in %v while 3 others were stuck", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("lease took effect %v after it ran out, with 3 releases stuck", time.Since(start).Round(time.Millisecond))
}
