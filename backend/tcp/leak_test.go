package tcp

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// TestNoGoroutineLeak runs routes through success, failure and close, closes
// everything, and checks that no goroutine is left.
func TestNoGoroutineLeak(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 4}, Config{})
	backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
	second := p.newRoute(t)
	backendtest.CheckRoute(t, waitTimeout, second, p.regA, p.regB)

	// A route that fails on its own (peer closes) and one left with work in
	// flight that never completes until Close.
	f := newFakeServer(t)
	failed := f.connect(t, p.a)
	f.accept(t).c.Close()
	assertFailed(t, failed, rdmamgr.ErrPeerGone)
	stuck := f.connect(t, p.a)
	f.accept(t)
	rec := backendtest.NewRecorder(1)
	_, local := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	if err := stuck.Post(&backend.WorkRequest{Op: backend.OpRead, Local: local, Remote: fakeRemote(4096),
		Deadline: time.Now().Add(waitTimeout), Done: rec}); err != nil {
		t.Fatalf("post: %v", err)
	}
	// A server connection left half-authenticated, and one idle.
	raw := dialRaw(t, p.b)
	writeRaw(t, raw, []byte("RDMT"))
	idle := authed(t, p.b)
	_ = idle

	// Close everything explicitly (cleanup closes it all again: idempotent).
	if err := p.route.Close(); err != nil {
		t.Fatalf("route Close: %v", err)
	}
	if err := p.a.Close(); err != nil { // closes second, failed and stuck
		t.Fatalf("Close a: %v", err)
	}
	if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, rdmamgr.ErrClosed) {
		t.Fatalf("in-flight op at Close: %v, want ErrClosed", res.Err)
	}
	for _, rt := range []backend.Route{second, stuck} {
		assertFailed(t, rt, rdmamgr.ErrClosed)
	}
	if err := p.b.Close(); err != nil {
		t.Fatalf("Close b: %v", err)
	}
	f.close()
	goleak.VerifyNone(t)
}

func TestCloseIdempotent(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	rt := p.newRoute(t)
	backendtest.CheckRoute(t, waitTimeout, rt, p.regA, p.regB)

	// Route Close, twice and concurrently.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rt.Close(); err != nil {
				t.Errorf("route Close: %v", err)
			}
		}()
	}
	wg.Wait()
	if err := rt.Close(); err != nil {
		t.Fatalf("route Close again: %v", err)
	}
	assertFailed(t, rt, rdmamgr.ErrClosed)

	// Backend Close, twice and concurrently; the remaining route goes down.
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.a.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}()
	}
	wg.Wait()
	if err := p.a.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	assertFailed(t, p.route, rdmamgr.ErrClosed)
	if err := p.route.Close(); err != nil {
		t.Fatalf("route Close after backend Close: %v", err)
	}

	ctx := context.Background()
	if _, _, err := p.a.PrepareRoute(ctx, backendtest.OwnerB); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("PrepareRoute after Close: %v, want ErrClosed", err)
	}
	if _, err := p.a.AcceptRoute(ctx, backendtest.OwnerB, encodeInitiatorInfo(1)); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("AcceptRoute after Close: %v, want ErrClosed", err)
	}
	if err := p.a.Start(ctx); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("Start after Close: %v, want ErrClosed", err)
	}

	// A handshake prepared before the responder closed fails to complete.
	pending, info, err := p.b.PrepareRoute(ctx, backendtest.OwnerA)
	if err != nil {
		t.Fatalf("PrepareRoute: %v", err)
	}
	c, regC := newBackend(t, Config{}, 0xC)
	_ = regC
	answer, err := c.AcceptRoute(ctx, backendtest.OwnerB, info)
	if err != nil {
		t.Fatalf("AcceptRoute: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close c: %v", err)
	}
	if _, err := pending.Complete(ctx, answer); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("Complete to a closed backend: %v, want ErrPeerGone", err)
	}
}

func TestLifecycleErrors(t *testing.T) {
	reg := memreg.NewRegistry(backendtest.OwnerA, buffer.Limits{})
	b, err := New(Config{}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := b.PrepareRoute(ctx, backendtest.OwnerB); !errors.Is(err, rdmamgr.ErrNotStarted) {
		t.Fatalf("PrepareRoute before Start: %v, want ErrNotStarted", err)
	}
	if _, err := b.AcceptRoute(ctx, backendtest.OwnerB, encodeInitiatorInfo(1)); !errors.Is(err, rdmamgr.ErrNotStarted) {
		t.Fatalf("AcceptRoute before Start: %v, want ErrNotStarted", err)
	}
	if b.Addr() != "" {
		t.Fatalf("Addr before Start: %q", b.Addr())
	}
	if err := b.Close(); err != nil { // Close without Start
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b2, _ := newBackend(t, Config{MaxPendingTokens: 3}, backendtest.OwnerB)
	if err := b2.Start(ctx); err == nil {
		t.Fatalf("second Start succeeded")
	}
	if _, err := b2.AcceptRoute(ctx, backendtest.OwnerA, []byte{1, 2}); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("AcceptRoute with garbage: %v, want ErrProtocol", err)
	}
	if _, err := b2.AcceptRoute(ctx, backendtest.OwnerA, encodeInitiatorInfo(2)); err != nil {
		t.Fatalf("AcceptRoute: %v", err)
	}
	if _, err := b2.AcceptRoute(ctx, backendtest.OwnerA, encodeInitiatorInfo(2)); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("AcceptRoute past MaxPendingTokens: %v, want ErrLimit", err)
	}
	a2, _ := newBackend(t, Config{}, backendtest.OwnerA)
	pending, _, err := a2.PrepareRoute(ctx, backendtest.OwnerB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pending.Complete(ctx, []byte{1, 0}); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("Complete with garbage info: %v, want ErrProtocol", err)
	}
	pending.Abort()

	for _, cfg := range []Config{
		{ConnsPerRoute: -1}, {ConnsPerRoute: maxConns + 1}, {ChunkSize: 2 << 20, MaxFrameLen: 1 << 20},
		{MaxFrameLen: 2 << 30}, {MaxInFlight: -1},
	} {
		if _, err := New(cfg, reg, nil); err == nil {
			t.Fatalf("New(%+v) accepted", cfg)
		}
	}
}
