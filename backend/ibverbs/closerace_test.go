//go:build ibverbs

package ibverbs

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// A PutWithImm still being prepared (its notice about to be written into
// a cell of the route's ring) when the route is closed fails with the
// route's error, and its notice is written while the ring is still there:
// teardown frees the ring only once no poster is preparing. (A poster
// racing Close once wrote the freed ring: a panic in
// TestControlRouteClose, or a write to unmapped memory.)
func TestPostRacingCloseKeepsRing(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	in := newTestInbox(regB, 16, 16)
	b.SetInbox(in)
	ha, _ := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, regB, 4096, accessNotifyW)
	rt := connect(t, a, b)
	r, ok := rt.(*route)
	if !ok {
		t.Fatalf("route %T", rt)
	}
	closed := make(chan struct{})
	var once sync.Once
	testHookNoticeCell = func(hr *route) {
		if hr != r {
			return
		}
		once.Do(func() {
			go func() { rt.Close(); close(closed) }()
			// The route fails at once; its teardown would free the
			// ring within this sleep if nothing held it.
			for r.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
		})
	}
	t.Cleanup(func() { testHookNoticeCell = nil })
	rec := backendtest.NewRecorder(1)
	wr, release := backendtest.NewWR(t, regA, backend.OpWriteImm, ha, hb, time.Now().Add(waitTimeout), rec)
	defer release()
	err := rt.Post(wr)
	if err == nil {
		err = rec.Wait(t, waitTimeout).Err
	}
	if !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("a PutWithImm posted as its route closed: %v, want ErrClosed", err)
	}
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal("Close did not return")
	}
}
