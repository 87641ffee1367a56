package backendtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Lifecycle: closing routes and backends, with and without work in
// flight.

func testRouteClose(t *testing.T, f Factory) {
	p := NewPair(t, f)
	ha, _ := Alloc(t, p.RegA, 4096, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, 4096, buffer.AccessReadWrite)
	if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put: %v", err)
	}
	if err := p.Route.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-p.Route.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if !errors.Is(p.Route.Err(), rdmamgr.ErrClosed) {
		t.Fatalf("Err after Close: %v, want rdmamgr.ErrClosed", p.Route.Err())
	}
	rec := NewRecorder(1)
	wr, release := NewWR(t, p.RegA, backend.OpWrite, ha, hb, time.Now().Add(f.Timeout), rec)
	defer release()
	if err := p.Route.Post(wr); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("post after Close: %v, want rdmamgr.ErrClosed", err)
	}
	time.Sleep(10 * time.Millisecond)
	rec.None(t)
	if err := p.Route.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	p.checkWorks(t)
}

// testRouteCloseInFlight closes a route with work in flight: every request
// is completed exactly once, before Close returns, with success or
// rdmamgr.ErrClosed.
func testRouteCloseInFlight(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const ops, n = 64, 256 << 10
	ha, _ := Alloc(t, p.RegA, ops*n, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, ops*n, buffer.AccessReadWrite)
	rec := NewRecorder(ops)
	posted := 0
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	for i := range ops {
		op := backend.OpWrite
		if i%2 == 1 {
			op = backend.OpRead
		}
		wr, release := NewWR(t, p.RegA, op, Slice(t, ha, i*n, n), Slice(t, hb, i*n, n), time.Now().Add(f.Timeout), rec)
		releases = append(releases, release)
		if err := p.Route.Post(wr); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		posted++
	}
	if err := p.Route.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := rec.Len(); got != posted {
		t.Fatalf("%d of %d requests completed when Close returned", got, posted)
	}
	for range posted {
		res := rec.Wait(t, time.Second)
		if res.Err != nil && !errors.Is(res.Err, rdmamgr.ErrClosed) {
			t.Errorf("request failed by Close with %v, want rdmamgr.ErrClosed", res.Err)
		}
	}
	rec.None(t)
	if st := p.Route.Stats(); st.InFlight != 0 {
		t.Errorf("in flight after Close: %d", st.InFlight)
	}
}

func testBackendClose(t *testing.T, f Factory) {
	p := NewPair(t, f)
	ha, _ := Alloc(t, p.RegA, 4096, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, 4096, buffer.AccessReadWrite)
	if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put: %v", err)
	}
	for i := range 2 {
		if err := p.A.Close(); err != nil {
			t.Fatalf("Close #%d of A: %v", i+1, err)
		}
	}
	select {
	case <-p.Route.Done():
	case <-time.After(f.Timeout):
		t.Fatal("route not done after its backend closed")
	}
	rec := NewRecorder(1)
	wr, release := NewWR(t, p.RegA, backend.OpWrite, ha, hb, time.Now().Add(f.Timeout), rec)
	defer release()
	if err := p.Route.Post(wr); err == nil {
		t.Fatal("post on a route of a closed backend accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	if _, _, err := p.A.PrepareRoute(ctx, OwnerB); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("PrepareRoute after Close: %v, want rdmamgr.ErrClosed", err)
	}
	if err := p.Route.Close(); err != nil {
		t.Fatalf("route Close after backend Close: %v", err)
	}
	time.Sleep(10 * time.Millisecond)
	rec.None(t)
	// Concurrent Close calls of B.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := p.B.Close(); err != nil {
				t.Errorf("concurrent Close of B: %v", err)
			}
		})
	}
	wg.Wait()
}
