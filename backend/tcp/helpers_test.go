package tcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Owner ids of the two test managers.
const (
	ownerA = 0xA11CE
	ownerB = 0xB0B
)

// waitTimeout bounds every wait of the tests; it is a hang guard, never an
// assertion on how fast something happens.
const waitTimeout = 30 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaks := waitNoLeaks(5 * time.Second); len(leaks) > 0 {
			fmt.Fprintf(os.Stderr, "goroutines of package tcp left after all tests:\n\n%s\n", strings.Join(leaks, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines returns the stacks of goroutines, other than the caller,
// that have a frame in this package.
func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	var out []string
	for _, s := range stacks[1:] { // stacks[0] is the calling goroutine
		if !strings.Contains(s, "github.com/rdmamgr/rdmamgr/backend/tcp.") {
			continue
		}
		// The test binary's main goroutine and parents of the calling
		// (sub)test wait in Run: they are the tests themselves.
		if strings.Contains(s, "testing.(*M).Run(") || strings.Contains(s, "testing.(*T).Run(") {
			continue
		}
		out = append(out, s)
	}
	return out
}

// waitNoLeaks polls until no goroutine of the package is left or d passed.
func waitNoLeaks(d time.Duration) []string {
	end := time.Now().Add(d)
	for {
		leaks := leakedGoroutines()
		if len(leaks) == 0 || time.Now().After(end) {
			return leaks
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newBackend returns a started backend on 127.0.0.1:0 serving a fresh
// registry of owner; both are closed at cleanup.
func newBackend(t testing.TB, cfg Config, owner uint64) (*Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	b, err := New(cfg, reg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("backend Close: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Errorf("registry Close: %v", err)
		}
	})
	return b, reg
}

// connect runs the route handshake directly (no actors): a prepares, b
// accepts, a completes. The route is closed at cleanup.
func connect(t testing.TB, a, b *Backend, peerOfA, peerOfB uint64) backend.Route {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pending, info, err := a.PrepareRoute(ctx, peerOfA)
	if err != nil {
		t.Fatalf("PrepareRoute: %v", err)
	}
	answer, err := b.AcceptRoute(ctx, peerOfB, info)
	if err != nil {
		pending.Abort()
		t.Fatalf("AcceptRoute: %v", err)
	}
	rt, err := pending.Complete(ctx, answer)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("route Close: %v", err)
		}
	})
	return rt
}

// pair is two managers' backends and a route from a (initiator) to b.
type pair struct {
	a, b       *Backend
	regA, regB *memreg.Registry
	route      backend.Route
}

func newPair(t testing.TB, cfgA, cfgB Config) *pair {
	t.Helper()
	p := &pair{}
	p.a, p.regA = newBackend(t, cfgA, ownerA)
	p.b, p.regB = newBackend(t, cfgB, ownerB)
	p.route = connect(t, p.a, p.b, ownerB, ownerA)
	return p
}

// newRoute opens another route from a to b.
func (p *pair) newRoute(t testing.TB) backend.Route {
	t.Helper()
	return connect(t, p.a, p.b, ownerB, ownerA)
}

// alloc allocates a region of n bytes in reg and returns its handle and memory.
func alloc(t testing.TB, reg *memreg.Registry, n uint64, access buffer.Access) (buffer.Buffer, []byte) {
	t.Helper()
	h, err := reg.Allocate(n, access)
	if err != nil {
		t.Fatalf("Allocate(%d): %v", n, err)
	}
	mem, err := reg.Bytes(h)
	if err != nil {
		t.Fatalf("Bytes: %v", err)
	}
	return h, mem
}

func randomBytes(t testing.TB, p []byte) {
	t.Helper()
	if _, err := rand.Read(p); err != nil {
		t.Fatalf("rand: %v", err)
	}
}

func randomData(t testing.TB, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	randomBytes(t, p)
	return p
}

func snapshot(p []byte) []byte { return append([]byte(nil), p...) }

// result is one completion.
type result struct {
	wr  *backend.WorkRequest
	err error
}

// recorder is a Completer that records results on a channel.
type recorder struct{ ch chan result }

func newRecorder(capacity int) *recorder { return &recorder{ch: make(chan result, capacity)} }

func (r *recorder) Complete(wr *backend.WorkRequest, err error) { r.ch <- result{wr, err} }

// wait returns the next completion, failing the test if none comes.
func (r *recorder) wait(t testing.TB) result {
	t.Helper()
	select {
	case res := <-r.ch:
		return res
	case <-time.After(waitTimeout):
		t.Fatalf("no completion within %v", waitTimeout)
		return result{}
	}
}

// none asserts that nothing was completed (used after a failed Post).
func (r *recorder) none(t testing.TB) {
	t.Helper()
	select {
	case res := <-r.ch:
		t.Fatalf("unexpected completion of %v: %v", res.wr.Op, res.err)
	default:
	}
}

// do posts one operation and returns Post's error or the completion's.
func do(t testing.TB, rt backend.Route, op backend.Op, local []byte, remote buffer.Buffer) error {
	t.Helper()
	rec := newRecorder(1)
	wr := &backend.WorkRequest{Op: op, Local: local, Remote: remote, Deadline: time.Now().Add(waitTimeout), Done: rec}
	if err := rt.Post(wr); err != nil {
		rec.none(t)
		return err
	}
	res := rec.wait(t)
	if res.wr != wr {
		t.Fatalf("completion of another work request")
	}
	rec.none(t) // exactly once
	return res.err
}

// mustSlice returns h[off:off+n].
func mustSlice(t testing.TB, h buffer.Buffer, off, n uint64) buffer.Buffer {
	t.Helper()
	s, err := h.Slice(off, n)
	if err != nil {
		t.Fatalf("Slice(%d,%d) of %v: %v", off, n, h, err)
	}
	return s
}

// checkPut puts fresh random bytes from a's memory into a fresh region of b
// over rt and verifies b's memory byte for byte.
func checkPut(t testing.TB, rt backend.Route, regA, regB *memreg.Registry) {
	t.Helper()
	const n = 64 << 10
	_, local := alloc(t, regA, n, buffer.AccessReadWrite)
	hb, remote := alloc(t, regB, n, buffer.AccessReadWrite)
	randomBytes(t, local)
	if err := do(t, rt, backend.OpWrite, local, hb); err != nil {
		t.Fatalf("put after hostile input: %v", err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatalf("put after hostile input: remote differs at %d", firstDiff(local, remote))
	}
}

// checkServes verifies that b still serves: a put on a fresh route.
func (p *pair) checkServes(t testing.TB) {
	t.Helper()
	checkPut(t, p.newRoute(t), p.regA, p.regB)
}

func firstDiff(a, b []byte) int {
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

func assertSame(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s changed (first difference at byte %d of %d)", what, firstDiff(got, want), len(want))
	}
}

// servedEventually polls b's served counters until ok accepts them. The
// server counts a READ after its payload went out, so the initiator may see
// the completion a moment before the counter moves.
func servedEventually(t testing.TB, b *Backend, ok func(backend.ServedStats) bool) backend.ServedStats {
	t.Helper()
	end := time.Now().Add(waitTimeout)
	for {
		sv := b.Served()
		if ok(sv) || time.Now().After(end) {
			return sv
		}
		time.Sleep(time.Millisecond)
	}
}
