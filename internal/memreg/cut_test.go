package memreg

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// cutRecorder records the regions it was told about.
type cutRecorder struct {
	mu  sync.Mutex
	ids []uint64
}

func (c *cutRecorder) CutRegion(r *Region) {
	c.mu.Lock()
	c.ids = append(c.ids, r.ID())
	c.mu.Unlock()
}

func (c *cutRecorder) count(id uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, x := range c.ids {
		if x == id {
			n++
		}
	}
	return n
}

// Cutters hear of revocation, release and lease changes; RemoteErr tells
// an admitted remote request why it must stop.
func TestCutterAndRemoteErr(t *testing.T) {
	g := NewRegistry(1, buffer.Limits{})
	var c cutRecorder
	g.AddCutter(&c)
	ctx := context.Background()

	a, err := g.Allocate(64, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := g.AcquireRemote(a.Region, a.Key, 0, 64, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	r := ref.Region()
	if err := g.RemoteErr(r); err != nil {
		t.Fatalf("RemoteErr of a live region: %v", err)
	}
	if err := g.SetLease(a, time.Hour); err != nil {
		t.Fatal(err)
	}
	if c.count(a.Region) != 1 {
		t.Errorf("SetLease: cutter called %d times, want 1", c.count(a.Region))
	}
	if err := g.SetLease(a, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	if err := g.RemoteErr(r); !errors.Is(err, rdmamgr.ErrExpired) {
		t.Errorf("RemoteErr after the lease: %v, want rdmamgr.ErrExpired", err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Revoke(ctx, a) }()
	// Revoke cuts, then waits for the request admitted above.
	deadline := time.Now().Add(10 * time.Second)
	for c.count(a.Region) < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c.count(a.Region) != 3 {
		t.Fatalf("Revoke did not call the cutter")
	}
	if err := g.RemoteErr(r); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Errorf("RemoteErr after Revoke: %v, want rdmamgr.ErrRevoked", err)
	}
	ref.Release()
	if err := <-done; err != nil {
		t.Fatalf("Revoke: %v", err)
	}

	b, err := g.Allocate(64, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	refb, err := g.AcquireRemote(b.Region, b.Key, 0, 64, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	rb := refb.Region()
	go func() { done <- g.Release(ctx, b) }()
	for c.count(b.Region) < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := g.RemoteErr(rb); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Errorf("RemoteErr after Release started: %v, want rdmamgr.ErrReleased", err)
	}
	refb.Release()
	if err := <-done; err != nil {
		t.Fatalf("Release: %v", err)
	}
	if c.count(b.Region) != 1 {
		t.Errorf("Release: cutter called %d times, want 1", c.count(b.Region))
	}
}
