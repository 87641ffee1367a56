package actor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// fakeBackend is a backend of any kind that never carries a route: its
// PrepareRoute fails with prepareErr (the initiator's own refusal, as shm's
// for a peer on another host) or hands out an endpoint whose route never
// completes; its AcceptRoute fails with acceptErr (the responder's).
type fakeBackend struct {
	kind                  backend.Kind
	prepareErr, acceptErr error
}

func (f *fakeBackend) Kind() backend.Kind              { return f.kind }
func (f *fakeBackend) Start(ctx context.Context) error { return nil }
func (f *fakeBackend) Addr() string                    { return "" }
func (f *fakeBackend) Served() backend.ServedStats     { return backend.ServedStats{} }
func (f *fakeBackend) Close() error                    { return nil }

func (f *fakeBackend) PrepareRoute(ctx context.Context, peerID uint64) (backend.PendingRoute, []byte, error) {
	if f.prepareErr != nil {
		return nil, nil, f.prepareErr
	}
	return fakePending{}, []byte{1}, nil
}

func (f *fakeBackend) AcceptRoute(ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
	if f.acceptErr != nil {
		return nil, f.acceptErr
	}
	return nil, fmt.Errorf("fake %s accepts nothing", f.kind)
}

type fakePending struct{}

func (fakePending) Complete(ctx context.Context, peerInfo []byte) (backend.Route, error) {
	return nil, errors.New("fake route")
}
func (fakePending) Abort() {}

// logBuffer collects a manager's log lines; safe for the manager's
// goroutines and the test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tcpHere places startChoices' TCP backend among its choices.
var tcpHere = Choice{Kind: backend.KindTCP}

// startChoices starts a manager named name on sys over choices and a TCP
// backend (in place of tcpHere, else last), logging into the returned
// buffer.
func startChoices(t *testing.T, sys *protoactor.ActorSystem, name string, choices ...Choice) (*Manager, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	m, err := New(sys, Config{Name: name, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := wiring.NewBackend[*tcp.Backend](tcp.Config{}, m.reg, m.Logger())
	if err == nil {
		err = tb.Start(testCtx(t))
	}
	if err != nil {
		t.Fatal(err)
	}
	placed := false
	for i, c := range choices {
		if c == tcpHere {
			choices[i], placed = Choice{Backend: tb}, true
		}
	}
	if !placed {
		choices = append(choices, Choice{Backend: tb})
	}
	if err := m.Start(testCtx(t), choices...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close manager %s: %v", name, err)
		}
	})
	return m, logs
}

var (
	errNoDevice   = fmt.Errorf("ibverbs: no RDMA devices: %w", rdmamgr.ErrNotSupported)
	errNotHere    = fmt.Errorf("peer is not on this host: %w", rdmamgr.ErrNotSupported)
	errXRefuses   = fmt.Errorf("x refuses: %w", rdmamgr.ErrNotSupported)
	notSupportedY = `handshake for backend "y", ours x+tcp: not supported`
)

// A route records every backend passed over before the one that connected,
// with its reason, in order: left out of the manager (ibverbs), refused by
// the initiator's own backend (shm), refused by the peer's backend (x), not
// run by the peer (y). The "route up" lines and status of both sides say
// it; the responder names the handshakes it refused.
func TestRouteSaysWhyItsBackend(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	a, aLog := startChoices(t, sys, "a",
		Choice{Kind: backend.KindIBVerbs, Err: errNoDevice},
		Choice{Backend: &fakeBackend{kind: backend.KindSHM, prepareErr: errNotHere}},
		Choice{Backend: &fakeBackend{kind: "x"}},
		Choice{Backend: &fakeBackend{kind: "y"}})
	b, bLog := startChoices(t, sys, "b", Choice{Backend: &fakeBackend{kind: "x", acceptErr: errXRefuses}})

	requestQP(t, ctx, a, b.PID())
	wantOut := strings.Join([]string{
		"ibverbs: no RDMA devices: not supported",
		"shm: peer is not on this host: not supported",
		"x: refused by the peer: x refuses: not supported",
		"y: refused by the peer: " + notSupportedY,
	}, "; ")
	rs := routes(t, ctx, a)
	if len(rs) != 1 || rs[0].Backend != "tcp" || rs[0].State != "up" || rs[0].Why != wantOut {
		t.Fatalf("a's routes: %v\nwant why %q", rs, wantOut)
	}
	if want := fmt.Sprintf("why=%q", wantOut); !strings.Contains(aLog.String(), want) {
		t.Errorf("a's log lacks %s:\n%s", want, aLog)
	}

	wantIn := `the peer's choice; we refused x: x refuses: not supported; we refused y: ` + notSupportedY
	in := inbound(t, ctx, b)
	if len(in) != 1 || in[0].Backend != "tcp" || in[0].Why != wantIn || in[0].PeerId != a.ID() {
		t.Fatalf("b's inbound routes: %v\nwant why %q", in, wantIn)
	}
	if want := fmt.Sprintf("why=%q", wantIn); !strings.Contains(bLog.String(), want) {
		t.Errorf("b's log lacks %s:\n%s", want, bLog)
	}
	// Declining a backend for this peer is a choice, not a refusal
	// (issue 23): not counted, not a warning.
	st, err := b.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Refusals[RefusedHandshake]; n != 0 {
		t.Errorf("b counted %d handshake refusals for backends it declined: %v", n, st.Refusals)
	}
	if strings.Contains(bLog.String(), "route handshake refused") {
		t.Errorf("b logged its declines as refusals:\n%s", bLog)
	}
}

// A peer whose backend speaks another version of its route info (an
// older ibverbs: no TCP fallback in its info) is passed over for the
// next backend, as one without the backend is, not left without a route.
func TestRoutePassesOverAnOlderVersion(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	a, _ := startChoices(t, sys, "a", Choice{Backend: &fakeBackend{kind: "x"}})
	b, _ := startChoices(t, sys, "b", Choice{Backend: &fakeBackend{kind: "x", acceptErr: fmt.Errorf("x: route info version 3, want 2: %w", rdmamgr.ErrVersion)}})
	requestQP(t, ctx, a, b.PID())
	rs := routes(t, ctx, a)
	if len(rs) != 1 || rs[0].Backend != "tcp" || rs[0].State != "up" || !strings.Contains(rs[0].Why, "x: refused by the peer: ") || !strings.Contains(rs[0].Why, "version mismatch") {
		t.Fatalf("a's routes: %v", rs)
	}
}

// A route on the first backend says so; a manager with one backend says
// that, and so does its peer's side.
func TestRouteFirstChoice(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	a, _ := startChoices(t, sys, "a")
	b, _ := startChoices(t, sys, "b", Choice{Backend: &fakeBackend{kind: backend.KindSHM, prepareErr: errNotHere}})
	c, _ := startChoices(t, sys, "c", Choice{Kind: backend.KindSHM, Err: errNotHere})
	d, _ := startChoices(t, sys, "d", tcpHere, Choice{Kind: backend.KindIBVerbs, Err: errNoDevice})

	requestQP(t, ctx, a, b.PID())
	requestQP(t, ctx, b, a.PID())
	requestQP(t, ctx, c, a.PID())
	requestQP(t, ctx, d, a.PID())
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].Why != whyOnly {
		t.Errorf("a's route: %v, want why %q", rs, whyOnly)
	}
	if rs := routes(t, ctx, b); len(rs) != 1 || rs[0].Why != "shm: peer is not on this host: not supported" {
		t.Errorf("b's route: %v", rs)
	}
	if rs := routes(t, ctx, c); len(rs) != 1 || rs[0].Why != "shm: peer is not on this host: not supported" {
		t.Errorf("c's route: %v", rs)
	}
	if rs := routes(t, ctx, d); len(rs) != 1 || rs[0].Why != whyFirst {
		t.Errorf("d's route: %v, want why %q", rs, whyFirst)
	}
	in := inbound(t, ctx, a)
	if len(in) != 3 {
		t.Errorf("a's inbound routes: %v, want 3", in)
	}
	for _, r := range in {
		if r.Why != whyPeer {
			t.Errorf("a's inbound route: %v, want why %q", r, whyPeer)
		}
	}
}

func inbound(t *testing.T, ctx context.Context, m *Manager) []*rdmapb.RouteStatus {
	t.Helper()
	st, err := m.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.Inbound
}

func TestWhyOf(t *testing.T) {
	for _, c := range []struct {
		passed  []string
		choices int
		want    string
	}{
		{nil, 1, whyOnly},
		{nil, 3, whyFirst},
		{[]string{"shm: a"}, 2, "shm: a"},
		{[]string{"shm: a", "ibverbs: b"}, 3, "shm: a; ibverbs: b"},
	} {
		if got := whyOf(c.passed, c.choices); got != c.want {
			t.Errorf("whyOf(%q, %d) = %q, want %q", c.passed, c.choices, got, c.want)
		}
	}
	for _, c := range []struct {
		kind backend.Kind
		err  error
		want string
	}{
		{"ibverbs", fmt.Errorf("ibverbs: %w", errNoDevice), "ibverbs: no RDMA devices: not supported"},
		{"shm", &setupError{what: "prepare shm route to p", cause: errNotHere}, "shm: peer is not on this host: not supported"},
		{"shm", fmt.Errorf("wrapped: %w", &setupError{what: "w", cause: errNotHere, byPeer: true}), "shm: refused by the peer: peer is not on this host: not supported"},
	} {
		if got := reasonOf(c.kind, c.err); got != c.want {
			t.Errorf("reasonOf(%s, %v) = %q, want %q", c.kind, c.err, got, c.want)
		}
	}
}

// The refusals kept for inbound routes are bounded in peers, reasons and
// length, whatever the peers send.
func TestNoteRefusedBounded(t *testing.T) {
	sys := newSystem(t)
	m := startManager(t, sys, Config{Name: "m"})
	long := backend.Kind(strings.Repeat("é", 1000))
	for i := range maxRefusedPeers + 10 {
		for range maxRefusedReasons + 2 {
			m.noteRefused(uint64(i)+1, long, errNotHere)
		}
	}
	m.ops.mu.Lock()
	defer m.ops.mu.Unlock()
	if n := len(m.ops.refused); n != maxRefusedPeers {
		t.Errorf("%d peers kept, want %d", n, maxRefusedPeers)
	}
	why := m.inboundWhyLocked(1)
	if n := strings.Count(why, "we refused"); n != maxRefusedReasons || len(why) > 2*maxRefusedReasons*maxReasonLen {
		t.Errorf("%d reasons, %d bytes kept for one peer", n, len(why))
	}
	if !strings.HasPrefix(why, whyPeer+"; we refused é") || !strings.HasSuffix(why, "…") {
		t.Errorf("why %.80q…", why)
	}
	if got := m.inboundWhyLocked(1); got != whyPeer {
		t.Errorf("refusals not forgotten once the route is up: %q", got)
	}
}
