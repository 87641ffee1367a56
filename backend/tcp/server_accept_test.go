package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func TestAcceptBackoff(t *testing.T) {
	var got []time.Duration
	d := time.Duration(0)
	for range 10 {
		d = acceptBackoff(d)
		got = append(got, d)
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoff %v, want %v ms", got, want)
		}
	}
}

func TestRetryAccept(t *testing.T) {
	op := func(e error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	for _, tc := range []struct {
		name  string
		err   error
		retry bool
	}{
		{"EMFILE", op(syscall.EMFILE), true},
		{"ENFILE", op(syscall.ENFILE), true},
		{"ECONNABORTED", op(syscall.ECONNABORTED), true},
		{"ENOBUFS", op(syscall.ENOBUFS), true},
		{"ENOMEM", op(syscall.ENOMEM), true},
		{"EPROTO", op(syscall.EPROTO), true},
		{"closed", op(net.ErrClosed), false},
		{"EBADF", op(syscall.EBADF), false},
		{"EINVAL", op(syscall.EINVAL), false},
		{"unknown", errors.New("boom"), false},
	} {
		if got := retryAccept(tc.err); got != tc.retry {
			t.Errorf("%s: retry %v, want %v", tc.name, got, tc.retry)
		}
	}
}

// failingListener fails Accept with errs (in order) before passing
// through to a real listener.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	errs  []error
	calls atomic.Int64
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.calls.Add(1)
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// newBackendOn is newBackend with the accept loop on ln.
func newBackendOn(t *testing.T, cfg Config, owner uint64, ln net.Listener) (*Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	b, err := New(cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.serveListener(ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = reg.Close(ctx)
	})
	return b, reg
}

func realListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Accept failing with EMFILE and friends is retried; the listener then
// serves routes as before.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	op := func(e error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	fl := &failingListener{Listener: realListener(t)}
	for range 2 {
		fl.errs = append(fl.errs, op(syscall.EMFILE), op(syscall.ENFILE), op(syscall.ECONNABORTED))
	}
	b, regB := newBackendOn(t, Config{}, backendtest.OwnerB, fl)
	a, regA := newBackend(t, Config{}, backendtest.OwnerA)
	waitFor(t, "the failing accepts", func() bool { return fl.calls.Load() > 6 })
	st := b.Listener()
	if st.Err != nil || st.AcceptRetries != 6 {
		t.Fatalf("listener after 6 temporary errors: %v", st)
	}
	if strings.Contains(b.Addr(), "down") {
		t.Fatalf("Addr %q", b.Addr())
	}
	rt := backendtest.MustConnect(t, waitTimeout, a, b, backendtest.OwnerB, backendtest.OwnerA)
	backendtest.CheckRoute(t, waitTimeout, rt, regA, regB)
}

// An error that no retry cures marks the listener down: Addr says so and
// AcceptRoute refuses instead of handing out a dead address.
func TestListenerDown(t *testing.T) {
	ln := realListener(t)
	defer ln.Close()
	fl := &failingListener{Listener: ln, errs: []error{errors.New("listener broke")}}
	b, _ := newBackendOn(t, Config{}, backendtest.OwnerB, fl)
	waitFor(t, "the listener to go down", func() bool { return b.Listener().Err != nil })
	if !strings.Contains(b.Addr(), "listener down: listener broke") {
		t.Errorf("Addr %q does not show the dead listener", b.Addr())
	}
	_, err := b.AcceptRoute(context.Background(), backendtest.OwnerA, encodeInitiatorInfo(1))
	if !errors.Is(err, ErrListenerDown) || !errors.Is(err, rdmamgr.ErrClosed) {
		t.Errorf("AcceptRoute on a dead listener: %v", err)
	}
}

// dialFrom dials b's data port from the loopback address src and returns
// the connection and whether the server sent its challenge (false: closed
// at once).
func dialFrom(t *testing.T, b *Backend, src string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: waitTimeout}
	c, err := d.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	var ch [challengeSize]byte
	_, err = io.ReadFull(c, ch[:])
	return c, err == nil
}

// Connections before the hello have their own caps, in all and per source
// address, and do not take authenticated slots.
func TestPreHelloCaps(t *testing.T) {
	cfg := Config{MaxPendingConns: 4, MaxPendingPerIP: 2, MaxServerConns: 2, HelloTimeout: time.Minute}
	p := newPair(t, Config{ConnsPerRoute: 2}, cfg) // the pair's route holds both authenticated slots
	var silent []net.Conn
	for i, src := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3", "127.0.0.4"} {
		c, served := dialFrom(t, p.b, src)
		// The third from .2 passes the per-address cap; the one from .4
		// the global cap.
		if want := i != 2 && i != 5; served != want {
			t.Fatalf("connection %d from %s: challenge %v, want %v", i, src, served, want)
		}
		if served {
			silent = append(silent, c)
		}
	}
	st := p.b.Listener()
	if st.Pending != 4 || st.RefusedPending != 2 || st.Authenticated != 2 {
		t.Fatalf("with the caps full: %v", st)
	}
	// The authenticated route still works.
	backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
	// No authenticated slot: a second route's hello is refused with a
	// limit error, after a pending slot is free for it.
	silent[0].Close()
	waitFor(t, "a pending slot", func() bool { return p.b.Listener().Pending == 3 })
	c, served := dialFrom(t, p.b, "127.0.0.1")
	if !served {
		t.Fatalf("no challenge with a pending slot free")
	}
	if code := sendHello(t, c, routeToken(t, p.b)); code != rdmapb.Code_RESOURCE_EXHAUSTED {
		t.Fatalf("hello past MaxServerConns: %v", code)
	}
	if !errors.Is(codeErr(0, byte(rdmapb.Code_RESOURCE_EXHAUSTED)), rdmamgr.ErrLimit) {
		t.Fatal("RESOURCE_EXHAUSTED is not rdmamgr.ErrLimit")
	}
	for _, c := range silent[1:] {
		c.Close()
	}
	waitFor(t, "the pending slots back", func() bool { return p.b.Listener().Pending == 0 })
	if st := p.b.Listener(); st.Authenticated != 2 || st.RefusedFull != 1 {
		t.Fatalf("after: %v", st)
	}
}

// A silent connection gives its pending slot back after HelloTimeout.
func TestPreHelloTimeoutFreesSlot(t *testing.T) {
	cfg := Config{MaxPendingConns: 1, HelloTimeout: 200 * time.Millisecond}
	p := newPair(t, Config{}, cfg)
	c, served := dialFrom(t, p.b, "127.0.0.2")
	if !served {
		t.Fatal("no challenge")
	}
	if got := expectClosed(t, c); len(got) != 0 {
		t.Fatalf("server sent %q to a silent client", got)
	}
	waitFor(t, "the slot back", func() bool { return p.b.Listener().Pending == 0 })
	p.newRoute(t)
}
