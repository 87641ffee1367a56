package queuepair

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// deviceRoute is a fake route that says it moves device locals itself.
type deviceRoute struct{ *fakeRoute }

func (deviceRoute) TakesDeviceLocal() bool { return true }

// TestDeviceLocalRoute: a route that takes device locals gets a Put from
// device memory as is (Local nil, LocalRegion the *memreg.DeviceSpan of
// the bytes), not staged.
func TestDeviceLocalRoute(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	w := cudafake.NewWorld(cudafake.Config{})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	e.local.SetCUDA(d, nil)
	q := newQueuePair(9, peerID, deviceRoute{e.route}, e.local, qpbind.Options{})
	t.Cleanup(q.Release)
	dev, err := e.local.AllocateAt(buffer.CUDA(0), 8192, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := e.remote.Allocate(4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	local := dev
	local.Offset, local.Length = 4096, 4096
	wr := q.Put(context.Background(), local, rb)
	got := <-e.route.posted
	span, ok := got.LocalRegion.(*memreg.DeviceSpan)
	if !ok || got.Local != nil || span.Len != 4096 || span.Dev != 0 {
		t.Fatalf("posted Local %d bytes, LocalRegion %T %+v: want the device span of 4096 bytes", len(got.Local), got.LocalRegion, span)
	}
	ref, err := e.local.AcquireLocalAny(&dev)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := ref.Device()
	ref.Release()
	if span.Ptr != whole.Ptr+4096 {
		t.Fatalf("span at %#x, want the buffer's %#x + 4096", span.Ptr, whole.Ptr)
	}
	complete(got, nil)
	if err := wr.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q.stage.ready.Load() {
		t.Fatal("staging workers made for a route that takes device locals")
	}
}

// TestStagedCancelEndsPostWait: a staged Put whose inner Put waits for
// room in flight (the route at its limit) is ended by Cancel: the wait
// ends, the Put reports context.Canceled, and the next staged Put on the
// same worker is not ended by that cancel.
func TestStagedCancelEndsPostWait(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	w := cudafake.NewWorld(cudafake.Config{})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	e.local.SetCUDA(d, nil)
	dev, err := e.local.AllocateAt(buffer.CUDA(0), 8192, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := e.remote.Allocate(8192, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	e.route.mu.Lock()
	e.route.full = true
	e.route.mu.Unlock()
	ctx := context.Background()
	wr := e.qp.Put(ctx, dev, rb)
	for { // its inner Put is in the route's Post
		e.route.mu.Lock()
		n := e.route.nPost
		e.route.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := wr.Cancel(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled staged put: %v, want context.Canceled", err)
	}
	e.route.mu.Lock()
	e.route.full = false
	e.route.mu.Unlock()
	wr2 := e.qp.Put(ctx, dev, rb)
	in := <-e.route.posted
	if in.Cancel == nil {
		t.Fatal("inner Put posted with no Cancel channel")
	}
	select {
	case <-in.Cancel:
		t.Fatal("the next staged put's inner Put was posted with a cancelled channel")
	default:
	}
	complete(in, nil)
	if err := wr2.Wait(ctx); err != nil {
		t.Fatalf("staged put after a cancelled one: %v", err)
	}
	e.qp.Release()
	e.route.mu.Lock()
	e.route.all = nil // completed, and reset by Release: nothing for the cleanup to fail
	e.route.mu.Unlock()
}

// TestStagedPipelineDepth: a staged Put or Get keeps up to stageDepth of
// its chunks' inner operations in flight on the route, not one or two: the
// route's round trip, not the copies, would bound a shallow pipeline. The
// fake route completes nothing until stageDepth inner operations were
// posted; then every chunk lands at its offset and the operation succeeds.
func TestStagedPipelineDepth(t *testing.T) {
	const chunk = 4096
	oldChunk := stageChunk
	stageChunk = chunk
	t.Cleanup(func() { stageChunk = oldChunk })
	e := newEnv(t, qpbind.Options{})
	w := cudafake.NewWorld(cudafake.Config{})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	e.local.SetCUDA(d, nil)
	chunks := stageDepth + 3
	n := uint64(chunks*chunk - 100)
	dev, err := e.local.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := e.remote.Allocate(n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, put := range []bool{true, false} {
		var wr *WorkRequest
		if put {
			wr = e.qp.Put(ctx, dev, rb)
		} else {
			wr = e.qp.Get(ctx, dev, rb)
		}
		var got []*backend.WorkRequest
		for len(got) < stageDepth { // all of them before any completes
			select {
			case in := <-e.route.posted:
				got = append(got, in)
			case <-time.After(10 * time.Second):
				t.Fatalf("put=%v: %d inner operations posted before any completed, want %d", put, len(got), stageDepth)
			}
		}
		for i := 0; i < chunks; i++ {
			if i >= len(got) {
				select {
				case in := <-e.route.posted:
					got = append(got, in)
				case <-time.After(10 * time.Second):
					t.Fatalf("put=%v: chunk %d never posted", put, i)
				}
			}
			in := got[i]
			if in.Remote.Offset != rb.Offset+uint64(i*chunk) || in.Remote.Length != min(chunk, n-uint64(i*chunk)) {
				t.Fatalf("put=%v: inner op %d at %d+%d, want %d+%d", put, i, in.Remote.Offset, in.Remote.Length, rb.Offset+uint64(i*chunk), min(chunk, n-uint64(i*chunk)))
			}
			complete(in, nil)
		}
		if err := wr.Wait(ctx); err != nil {
			t.Fatalf("put=%v: %v", put, err)
		}
	}
	e.qp.Release()
	e.route.mu.Lock()
	e.route.all = nil // completed, and reset by Release: nothing for the cleanup to fail
	e.route.mu.Unlock()
}
