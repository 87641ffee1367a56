//go:build linux

package hostagent

import (
	"errors"
	"os"
	"testing"

	"github.com/rdmamgr/rdmamgr"
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
