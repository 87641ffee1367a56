//go:build linux

package hostagent

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// A process of a served user that proves the secret attaches: it gets a
// slot, its generation, the agent's address and id and the host id; the
// socket is mode 0660; detaching frees the slot; Close removes the socket.
func TestAttach(t *testing.T) {
	secret := testSecret(t)
	sys := newSystem(t)
	a := startAgent(t, sys, "agentA", 7, secret)
	ctx := testCtx(t)
	st, err := os.Stat(a.cfg.Socket)
	if err != nil || st.Mode().Perm() != 0o660 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: %v, %v", a.cfg.Socket, st.Mode(), err)
	}
	f := newFakeProc(t, secret)
	if err := f.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	w := f.welcome
	if w.Slot != 1 || w.Generation != 1 || w.AgentAddr != "nonhost/agentA" || w.AgentID != a.mgr.ID() || w.HostID[0] != 7 {
		t.Fatalf("welcome %+v", w)
	}
	if a.Procs() != 1 {
		t.Fatalf("%d processes attached, want 1", a.Procs())
	}
	if _, err := a.procAt(1); err != nil {
		t.Fatal(err)
	}
	f.c.Close()
	waitFor(t, "the slot to be dropped", func() bool { return a.Procs() == 0 })
	if _, err := a.procAt(1); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("slot of a gone process: %v", err)
	}
	a.Close()
	if _, err := os.Stat(a.cfg.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket after Close: %v", err)
	}
}

// A wrong MAC, a pid other than the kernel's, and a user the agent does
// not serve are refused; the agent serves on.
func TestAttachRefused(t *testing.T) {
	secret := testSecret(t)
	sys := newSystem(t)
	a := startAgent(t, sys, "agentA", 1, secret)
	ctx := testCtx(t)
	f := newFakeProc(t, secret)
	err := f.attach(ctx, a.cfg.Socket, attachOpts{secret: testSecret(t)})
	if !errors.Is(err, rdmamgr.ErrUnauthenticated) {
		t.Fatalf("bad MAC: %v", err)
	}
	err = f.attach(ctx, a.cfg.Socket, attachOpts{secret: secret, pid: uint32(os.Getpid() + 1)})
	if !errors.Is(err, rdmamgr.ErrUnauthenticated) {
		t.Fatalf("pid mismatch: %v", err)
	}
	a.mu.Lock()
	a.uid = os.Getuid() + 1000 // our uid is now one it does not serve
	a.mu.Unlock()
	if err := f.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err == nil {
		t.Fatal("user not served: attached")
	}
	a.mu.Lock()
	a.cfg.AllowUIDs = []int{os.Getuid()}
	a.mu.Unlock()
	if err := f.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatalf("user allowed: %v", err)
	}
	if a.Procs() != 1 {
		t.Fatalf("%d processes attached, want 1", a.Procs())
	}
}

// At most maxPreAuth connections are in their handshake at once: one more
// is closed at accept, without a hello; a silent one is closed after
// handshakeTimeout, and its place serves the next.
func TestAttachCaps(t *testing.T) {
	old := handshakeTimeout
	handshakeTimeout = 2 * time.Second
	t.Cleanup(func() { handshakeTimeout = old })
	secret := testSecret(t)
	a := startAgent(t, newSystem(t), "agentA", 1, secret)
	ctx := testCtx(t)
	buf := make([]byte, agentwire.MaxPacket)
	var silent []*net.UnixConn
	for range maxPreAuth {
		c, err := agentwire.Dial(ctx, a.cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := agentwire.ReadPacket(c, buf); err != nil { // the hello: admitted
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	c, err := agentwire.Dial(ctx, a.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := agentwire.ReadPacket(c, buf); err == nil {
		t.Fatal("a connection past the cap got a hello")
	}
	// The silent ones are closed after the handshake timeout; then a
	// process attaches.
	if pkt, err := agentwire.ReadPacket(silent[0], buf); err == nil {
		if g, err := agentwire.DecodeGone(pkt); err != nil || !errors.Is(g.Err(), rdmamgr.ErrDeadline) {
			t.Fatalf("a silent connection got %v (%v), want gone: deadline", g, err)
		}
		if _, err := agentwire.ReadPacket(silent[0], buf); err == nil {
			t.Fatal("a silent connection still open after its gone")
		}
	}
	f := newFakeProc(t, secret)
	waitFor(t, "room for a handshake", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.preAuth < maxPreAuth
	})
	if err := f.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
}
