package backendtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Owner ids of the two managers of a subtest.
const (
	OwnerA = 0xA11CE
	OwnerB = 0xB0B
)

// Factory builds backends and declares what the backend reports where
// backends legitimately differ.
type Factory struct {
	// NewBackend returns a started backend serving a fresh registry of the
	// manager owner. The suite closes the backend, then the registry.
	NewBackend func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry)
	// WrongKeyErr is what an operation with a wrong key fails with
	// (errors.Is): TCP checks the region key (buffer.ErrBadKey); RDMA
	// hardware checks the rkey and reports a remote access error
	// (buffer.ErrAccess).
	WrongKeyErr error
	// ReleasedErr is what an operation on a region its owner released fails
	// with: buffer.ErrReleased for TCP, a remote access error for RDMA.
	ReleasedErr error
	// OutOfRangeErr is what an operation on a forged handle that reaches
	// past its region fails with: buffer.ErrOutOfRange for TCP, a remote
	// access error for RDMA.
	OutOfRangeErr error
	// RevokedErr is what an operation on a region its owner revoked
	// (Registry.Revoke) fails with: buffer.ErrRevoked for TCP, a remote
	// access error for RDMA. Nil skips the revocation test.
	RevokedErr error
	// RouteSurvivesRemoteError: the route keeps working after the peer
	// refused an operation (TCP). An RDMA RC queue pair goes to the error
	// state instead: the route fails and the manager builds a new one.
	RouteSurvivesRemoteError bool
	// MaxSize is the largest operation the suite moves (16 MiB if 0).
	MaxSize int
	// Timeout bounds every wait (hang guard, not an assertion; 2 min if 0).
	Timeout time.Duration
}

// Run runs the suite.
func Run(t *testing.T, f Factory) {
	if f.NewBackend == nil {
		t.Fatal("backendtest: Factory.NewBackend is nil")
	}
	if f.MaxSize == 0 {
		f.MaxSize = 16 << 20
	}
	if f.Timeout == 0 {
		f.Timeout = 2 * time.Minute
	}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"PutGetSizesOffsets", testPutGet},
		{"ManyInFlight", testManyInFlight},
		{"WriteToReadOnly", testWriteReadOnly},
		{"ReadFromWriteOnly", testReadWriteOnly},
		{"WrongKey", testWrongKey},
		{"ReleasedRegion", testReleased},
		{"OutOfRange", testOutOfRange},
		{"RevokedRegion", testRevoked},
		{"NoCompletionOnPostError", testLengthMismatch},
		{"RouteCloseFailsLaterPosts", testRouteClose},
		{"RouteCloseWithWorkInFlight", testRouteCloseInFlight},
		{"BackendCloseIdempotent", testBackendClose},
		{"HostileRouteInfo", testHostileInfo},
		{"Stats", testStats},
		{"CancelAndDeadlineIsolation", testCancel},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// Pair is two managers' backends, A and B, and a route from A to B.
type Pair struct {
	f          Factory
	A, B       backend.Backend
	RegA, RegB *memreg.Registry
	Route      backend.Route
}

// NewPair builds A and B and a route from A to B; everything is closed at
// the end of the test.
func NewPair(t testing.TB, f Factory) *Pair {
	t.Helper()
	p := &Pair{f: f}
	p.A, p.RegA = f.NewBackend(t, OwnerA)
	cleanupBackend(t, f, p.A, p.RegA)
	p.B, p.RegB = f.NewBackend(t, OwnerB)
	cleanupBackend(t, f, p.B, p.RegB)
	p.Route = p.NewRoute(t)
	return p
}

func cleanupBackend(t testing.TB, f Factory, b backend.Backend, reg *memreg.Registry) {
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("%s backend Close: %v", b.Kind(), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Errorf("registry Close: %v", err)
		}
	})
}

// NewRoute connects another route from A to B (closed at the end of the
// test).
func (p *Pair) NewRoute(t testing.TB) backend.Route {
	t.Helper()
	rt, err := Connect(p.f.Timeout, p.A, p.B, OwnerB, OwnerA)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("route Close: %v", err)
		}
	})
	return rt
}

// Connect runs the route handshake directly (no actors): a prepares, b
// accepts, a completes.
func Connect(timeout time.Duration, a, b backend.Backend, peerOfA, peerOfB uint64) (backend.Route, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pending, info, err := a.PrepareRoute(ctx, peerOfA)
	if err != nil {
		return nil, fmt.Errorf("PrepareRoute: %w", err)
	}
	answer, err := b.AcceptRoute(ctx, peerOfB, info)
	if err != nil {
		pending.Abort()
		return nil, fmt.Errorf("AcceptRoute: %w", err)
	}
	rt, err := pending.Complete(ctx, answer)
	if err != nil {
		pending.Abort()
		return nil, fmt.Errorf("Complete: %w", err)
	}
	return rt, nil
}

// Alloc allocates n bytes in reg and returns the handle and its memory.
func Alloc(t testing.TB, reg *memreg.Registry, n int, access buffer.Access) (buffer.Buffer, []byte) {
	t.Helper()
	h, err := reg.Allocate(uint64(n), access)
	if err != nil {
		t.Fatalf("Allocate(%d): %v", n, err)
	}
	mem, err := reg.Bytes(h)
	if err != nil {
		t.Fatalf("Bytes: %v", err)
	}
	return h, mem
}

// Random fills p with crypto/rand bytes.
func Random(t testing.TB, p []byte) {
	t.Helper()
	if _, err := rand.Read(p); err != nil {
		t.Fatalf("rand: %v", err)
	}
}

// Slice returns h[off:off+n].
func Slice(t testing.TB, h buffer.Buffer, off, n int) buffer.Buffer {
	t.Helper()
	s, err := h.Slice(uint64(off), uint64(n))
	if err != nil {
		t.Fatalf("Slice(%d,%d) of %v: %v", off, n, h, err)
	}
	return s
}

// Result is one completion.
type Result struct {
	WR  *backend.WorkRequest
	Err error
}

// Recorder is a Completer that records results on a channel.
type Recorder struct{ ch chan Result }

// NewRecorder returns a recorder that buffers capacity results.
func NewRecorder(capacity int) *Recorder { return &Recorder{ch: make(chan Result, capacity)} }

// Complete implements backend.Completer.
func (r *Recorder) Complete(wr *backend.WorkRequest, err error) { r.ch <- Result{wr, err} }

// Wait returns the next completion, failing the test if none comes.
func (r *Recorder) Wait(t testing.TB, timeout time.Duration) Result {
	t.Helper()
	select {
	case res := <-r.ch:
		return res
	case <-time.After(timeout):
		t.Fatalf("no completion within %v", timeout)
		return Result{}
	}
}

// None asserts that nothing was completed.
func (r *Recorder) None(t testing.TB) {
	t.Helper()
	select {
	case res := <-r.ch:
		t.Fatalf("unexpected completion of %v: %v", res.WR.Op, res.Err)
	default:
	}
}

// Len returns the number of recorded completions not yet taken.
func (r *Recorder) Len() int { return len(r.ch) }

// NewWR resolves local (a handle of reg) and returns a work request for it.
// The local reference is dropped by the returned release func.
func NewWR(t testing.TB, reg *memreg.Registry, op backend.Op, local, remote buffer.Buffer, deadline time.Time, done backend.Completer) (*backend.WorkRequest, func()) {
	t.Helper()
	ref, err := reg.AcquireLocal(local)
	if err != nil {
		t.Fatalf("AcquireLocal(%v): %v", local, err)
	}
	return &backend.WorkRequest{Op: op, Local: ref.Bytes(), LocalRegion: ref.Region(), Remote: remote, Deadline: deadline, Done: done}, ref.Release
}

// Do posts one operation and returns Post's error or the completion's.
func Do(t testing.TB, timeout time.Duration, rt backend.Route, reg *memreg.Registry, op backend.Op, local, remote buffer.Buffer) error {
	t.Helper()
	rec := NewRecorder(1)
	wr, release := NewWR(t, reg, op, local, remote, time.Now().Add(timeout), rec)
	defer release()
	if err := rt.Post(wr); err != nil {
		rec.None(t)
		return err
	}
	res := rec.Wait(t, timeout+10*time.Second)
	if res.WR != wr {
		t.Fatalf("completion of another work request")
	}
	time.Sleep(time.Millisecond)
	rec.None(t) // exactly once
	return res.Err
}

// FirstDiff returns the first index where a and b differ, -1 if equal.
func FirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// AssertSame fails unless got equals want.
func AssertSame(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs at byte %d of %d", what, FirstDiff(got, want), len(want))
	}
}

func snapshot(p []byte) []byte { return append([]byte(nil), p...) }

// checkWorks moves 64 KiB both ways on a fresh route and verifies it.
func (p *Pair) checkWorks(t *testing.T) {
	t.Helper()
	rt := p.NewRoute(t)
	const n = 64 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	if err := Do(t, p.f.Timeout, rt, p.RegA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put on a new route: %v", err)
	}
	AssertSame(t, "remote after put on a new route", lb, la)
	Random(t, lb)
	if err := Do(t, p.f.Timeout, rt, p.RegA, backend.OpRead, ha, hb); err != nil {
		t.Fatalf("get on a new route: %v", err)
	}
	AssertSame(t, "local after get on a new route", la, lb)
}

// afterRemoteError checks the route's state after the peer refused an
// operation, and that the backends still serve.
func (p *Pair) afterRemoteError(t *testing.T, rt backend.Route) {
	t.Helper()
	if p.f.RouteSurvivesRemoteError {
		select {
		case <-rt.Done():
			t.Fatalf("route failed after a refused operation: %v", rt.Err())
		default:
		}
	} else {
		select {
		case <-rt.Done():
			if rt.Err() == nil {
				t.Fatal("route done without an error")
			}
		case <-time.After(p.f.Timeout):
			t.Fatal("route not failed after a remote error on an RC queue pair")
		}
	}
	p.checkWorks(t)
}

func testPutGet(t *testing.T, f Factory) {
	p := NewPair(t, f)
	sizes := []int{1, 3, 4096, 64<<10 + 7, 1<<20 + 13, f.MaxSize}
	type offs struct{ local, remote int }
	const maxOff = 4093
	for _, n := range sizes {
		cases := []offs{{0, 0}, {1, maxOff}, {maxOff, 1}}
		if n >= 4<<20 {
			cases = cases[:2] // keep the largest moves few
		}
		size := n + maxOff + 3
		ha, la := Alloc(t, p.RegA, size, buffer.AccessReadWrite)
		hb, lb := Alloc(t, p.RegB, size, buffer.AccessReadWrite)
		for _, o := range cases {
			name := fmt.Sprintf("%d bytes local+%d remote+%d", n, o.local, o.remote)
			// Put: the remote range gets the local bytes, nothing else changes.
			Random(t, la)
			Random(t, lb)
			wantB := snapshot(lb)
			copy(wantB[o.remote:o.remote+n], la[o.local:o.local+n])
			wantA := snapshot(la)
			if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, Slice(t, ha, o.local, n), Slice(t, hb, o.remote, n)); err != nil {
				t.Fatalf("put %s: %v", name, err)
			}
			AssertSame(t, "remote after put "+name, lb, wantB)
			AssertSame(t, "local after put "+name, la, wantA)
			// Get: the local range gets the remote bytes, nothing else changes.
			Random(t, la)
			Random(t, lb)
			wantA = snapshot(la)
			copy(wantA[o.local:o.local+n], lb[o.remote:o.remote+n])
			wantB = snapshot(lb)
			if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, Slice(t, ha, o.local, n), Slice(t, hb, o.remote, n)); err != nil {
				t.Fatalf("get %s: %v", name, err)
			}
			AssertSame(t, "local after get "+name, la, wantA)
			AssertSame(t, "remote after get "+name, lb, wantB)
		}
		if err := p.RegA.Release(context.Background(), ha); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := p.RegB.Release(context.Background(), hb); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
}

// testManyInFlight posts far more operations than any in-flight limit from
// several goroutines, to disjoint ranges, and verifies all of them.
func testManyInFlight(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const (
		ops     = 1200
		posters = 4
		maxLen  = 16 << 10
	)
	type job struct {
		op       backend.Op
		off, n   int
		wr       *backend.WorkRequest
		release  func()
		hasLocal bool
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	jobs := make([]*job, ops)
	total := 0
	for i := range jobs {
		n := 1 + rng.IntN(maxLen)
		op := backend.OpWrite
		if i%3 == 0 {
			op = backend.OpRead
		}
		jobs[i] = &job{op: op, off: total, n: n}
		total += n + rng.IntN(64)
	}
	ha, la := Alloc(t, p.RegA, total, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, total, buffer.AccessReadWrite)
	Random(t, la)
	Random(t, lb)
	wantA, wantB := snapshot(la), snapshot(lb)
	for _, j := range jobs {
		if j.op == backend.OpWrite {
			copy(wantB[j.off:j.off+j.n], la[j.off:j.off+j.n])
		} else {
			copy(wantA[j.off:j.off+j.n], lb[j.off:j.off+j.n])
		}
	}
	rec := NewRecorder(ops)
	deadline := time.Now().Add(f.Timeout)
	for _, j := range jobs {
		j.wr, j.release = NewWR(t, p.RegA, j.op, Slice(t, ha, j.off, j.n), Slice(t, hb, j.off, j.n), deadline, rec)
	}
	var wg sync.WaitGroup
	errs := make(chan error, posters)
	for g := range posters {
		wg.Go(func() {
			for i := g; i < ops; i += posters {
				if err := p.Route.Post(jobs[i].wr); err != nil {
					errs <- fmt.Errorf("post %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := make(map[*backend.WorkRequest]bool, ops)
	for range ops {
		res := rec.Wait(t, f.Timeout+10*time.Second)
		if seen[res.WR] {
			t.Fatalf("work request completed twice")
		}
		seen[res.WR] = true
		if res.Err != nil {
			t.Fatalf("%s of %d bytes: %v", res.WR.Op, len(res.WR.Local), res.Err)
		}
	}
	for _, j := range jobs {
		j.release()
	}
	AssertSame(t, "local after many gets", la, wantA)
	AssertSame(t, "remote after many puts", lb, wantB)
	if st := p.Route.Stats(); st.InFlight != 0 || st.Ops != ops {
		t.Errorf("stats after %d ops: %+v", ops, st)
	}
}

func testWriteReadOnly(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 8 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessRead)
	Random(t, la)
	Random(t, lb)
	before := snapshot(lb)
	err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb)
	if !errors.Is(err, buffer.ErrAccess) {
		t.Fatalf("put to a read-only buffer: %v, want buffer.ErrAccess", err)
	}
	t.Logf("put to a read-only buffer: %v", err)
	AssertSame(t, "read-only buffer after a refused put", lb, before)
	p.afterRemoteError(t, p.Route)
	// Reading it is allowed.
	if err := Do(t, f.Timeout, p.NewRoute(t), p.RegA, backend.OpRead, ha, hb); err != nil {
		t.Fatalf("get from a read-only buffer: %v", err)
	}
	AssertSame(t, "local after get from a read-only buffer", la, lb)
}

func testReadWriteOnly(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 8 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessWrite)
	Random(t, la)
	Random(t, lb)
	beforeA, beforeB := snapshot(la), snapshot(lb)
	err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, ha, hb)
	if !errors.Is(err, buffer.ErrAccess) {
		t.Fatalf("get from a write-only buffer: %v, want buffer.ErrAccess", err)
	}
	AssertSame(t, "local after a refused get", la, beforeA)
	AssertSame(t, "write-only buffer after a refused get", lb, beforeB)
	p.afterRemoteError(t, p.Route)
}

func testWrongKey(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 4 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	Random(t, lb)
	before := snapshot(lb)
	bad := hb
	bad.Key[0] ^= 0xff
	if bad.RDMA.RKey != 0 {
		bad.RDMA.RKey ^= 0xA5 // the key byte of the rkey: same MR index, wrong key
	}
	for i, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		err := Do(t, f.Timeout, rt, p.RegA, op, ha, bad)
		if !errors.Is(err, f.WrongKeyErr) {
			t.Fatalf("%s with a wrong key: %v, want %v", op, err, f.WrongKeyErr)
		}
		t.Logf("%s with a wrong key: %v", op, err)
		AssertSame(t, "owner memory after a wrong key", lb, before)
		p.afterRemoteError(t, rt)
	}
}

func testReleased(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 4 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put before release: %v", err)
	}
	if err := p.RegB.Release(context.Background(), hb); err != nil {
		t.Fatalf("release at the owner: %v", err)
	}
	for i, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		err := Do(t, f.Timeout, rt, p.RegA, op, ha, hb)
		if !errors.Is(err, f.ReleasedErr) {
			t.Fatalf("%s on a released region: %v, want %v", op, err, f.ReleasedErr)
		}
		t.Logf("%s on a released region: %v", op, err)
		p.afterRemoteError(t, rt)
	}
}

// testRevoked: once Registry.Revoke returns, peers can neither write nor
// read the region, its memory is unchanged, and the owner's own use of it
// (here: as the local side of a put to the peer) goes on.
func testRevoked(t *testing.T, f Factory) {
	if f.RevokedErr == nil {
		t.Skip("the factory declares no revocation error")
	}
	p := NewPair(t, f)
	const n = 4 << 10
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put before revoke: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	if err := p.RegB.Revoke(ctx, hb); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	Random(t, lb)
	before := snapshot(lb)
	for i, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		err := Do(t, f.Timeout, rt, p.RegA, op, ha, hb)
		if !errors.Is(err, f.RevokedErr) {
			t.Fatalf("%s on a revoked region: %v, want %v", op, err, f.RevokedErr)
		}
		t.Logf("%s on a revoked region: %v", op, err)
		AssertSame(t, "revoked region", lb, before)
		p.afterRemoteError(t, rt)
	}
	// The owner still uses it: B puts from it to A on a route B -> A.
	rt, err := Connect(f.Timeout, p.B, p.A, OwnerA, OwnerB)
	if err != nil {
		t.Fatalf("connect B to A: %v", err)
	}
	defer rt.Close()
	ha2, la2 := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	if err := Do(t, f.Timeout, rt, p.RegB, backend.OpWrite, hb, ha2); err != nil {
		t.Fatalf("owner's put from its revoked region: %v", err)
	}
	AssertSame(t, "peer after the owner's put from a revoked region", la2, lb)
}

func testOutOfRange(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 4 << 10
	const over = 512
	ha, la := Alloc(t, p.RegA, over, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	Random(t, la)
	Random(t, lb)
	before := snapshot(lb)
	forged := hb
	forged.Offset = n - over/2 // half inside, half past the end
	forged.Length = over
	err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, forged)
	if !errors.Is(err, f.OutOfRangeErr) {
		t.Fatalf("put past the region: %v, want %v", err, f.OutOfRangeErr)
	}
	t.Logf("put past the region: %v", err)
	AssertSame(t, "owner memory after a put past the region", lb, before)
	p.afterRemoteError(t, p.Route)
}

// testLengthMismatch: a request Post refuses is never completed.
func testLengthMismatch(t *testing.T, f Factory) {
	p := NewPair(t, f)
	ha, _ := Alloc(t, p.RegA, 100, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, 200, buffer.AccessReadWrite)
	rec := NewRecorder(1)
	wr, release := NewWR(t, p.RegA, backend.OpWrite, ha, hb, time.Now().Add(f.Timeout), rec)
	defer release()
	if err := p.Route.Post(wr); err == nil {
		t.Fatal("post with local 100 bytes and remote 200 accepted")
	}
	wr2, release2 := NewWR(t, p.RegA, backend.Op(99), ha, Slice(t, hb, 0, 100), time.Now().Add(f.Timeout), rec)
	defer release2()
	if err := p.Route.Post(wr2); err == nil {
		t.Fatal("post of an unknown op accepted")
	}
	time.Sleep(10 * time.Millisecond)
	rec.None(t)
	p.checkWorks(t)
}

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
	if !errors.Is(p.Route.Err(), backend.ErrClosed) {
		t.Fatalf("Err after Close: %v, want backend.ErrClosed", p.Route.Err())
	}
	rec := NewRecorder(1)
	wr, release := NewWR(t, p.RegA, backend.OpWrite, ha, hb, time.Now().Add(f.Timeout), rec)
	defer release()
	if err := p.Route.Post(wr); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("post after Close: %v, want backend.ErrClosed", err)
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
// backend.ErrClosed.
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
		if res.Err != nil && !errors.Is(res.Err, backend.ErrClosed) {
			t.Errorf("request failed by Close with %v, want backend.ErrClosed", res.Err)
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
	if _, _, err := p.A.PrepareRoute(ctx, OwnerB); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("PrepareRoute after Close: %v, want backend.ErrClosed", err)
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

func testHostileInfo(t *testing.T, f Factory) {
	p := NewPair(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	first, good, err := p.A.PrepareRoute(ctx, OwnerB)
	if err != nil {
		t.Fatalf("PrepareRoute: %v", err)
	}
	defer first.Abort()
	junk := [][]byte{nil, {}, {0xff}, bytes.Repeat([]byte{0xff}, 64), good[:len(good)-1], append(snapshot(good), 0)}
	for _, info := range junk {
		_, err := p.B.AcceptRoute(ctx, OwnerA, info)
		if !errors.Is(err, backend.ErrProtocol) && !errors.Is(err, backend.ErrVersion) {
			t.Errorf("AcceptRoute(%x): %v, want backend.ErrProtocol or ErrVersion", info, err)
		}
	}
	for _, info := range junk {
		pending, _, err := p.A.PrepareRoute(ctx, OwnerB)
		if err != nil {
			t.Fatalf("PrepareRoute: %v", err)
		}
		rt, err := pending.Complete(ctx, info)
		if err == nil {
			rt.Close()
			t.Errorf("Complete(%x) accepted", info)
		}
		pending.Abort()
	}
	p.checkWorks(t)
}

func testStats(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 10000
	ha, _ := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	for range 3 {
		if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	for range 2 {
		if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, ha, hb); err != nil {
			t.Fatalf("get: %v", err)
		}
	}
	want := backend.RouteStats{Ops: 5, BytesPut: 3 * n, BytesGot: 2 * n}
	if st := p.Route.Stats(); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
}
