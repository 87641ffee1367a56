//go:build linux

package shm_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestCapsPreAuthPerUID: connections of one user that do not authenticate
// hold at most MaxPreAuthPerUID handshakes; the next ones are closed at
// accept, without a hello; once they go, routes are made again.
func TestCapsPreAuthPerUID(t *testing.T) {
	p := newPair(t, shm.Config{})
	var held []*rawConn
	for range shm.MaxPreAuthPerUID {
		r := dialRaw(t, p.b)
		r.hello(t)
		held = append(held, r)
	}
	for i := range 4 {
		r := dialRaw(t, p.b)
		if m, _, err := r.read(); err == nil {
			t.Fatalf("connection %d past the cap got %x: want it closed at accept", shm.MaxPreAuthPerUID+i+1, m)
		}
	}
	for _, r := range held {
		r.c.Close()
	}
	deadline := time.Now().Add(timeout)
	for { // the owner notices the closed connections in its own time
		r := dialRaw(t, p.b)
		if _, _, err := r.read(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pre-auth slots not given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	checkServes(t, p)
}

// TestCapsRoutesPerPeer: one peer manager holds at most MaxRoutesPerPeer
// tokens and connections; others still get theirs.
func TestCapsRoutesPerPeer(t *testing.T) {
	p := newPair(t, shm.Config{})
	info := shm.EncodeInfo(uint32(os.Getpid()), uint32(os.Getuid()))
	n := 0
	for ; n < 10*shm.MaxRoutesPerPeer; n++ {
		if _, err := p.b.AcceptRoute(context.Background(), 0xBAD, info); err != nil {
			if !errors.Is(err, rdmamgr.ErrLimit) {
				t.Fatalf("route %d: %v, want ErrLimit", n, err)
			}
			break
		}
	}
	if n != shm.MaxRoutesPerPeer {
		t.Fatalf("peer got %d tokens, want %d", n, shm.MaxRoutesPerPeer)
	}
	if _, err := p.b.AcceptRoute(context.Background(), backendtest.OwnerA, info); err != nil {
		t.Fatalf("another peer's route: %v", err)
	}
}

// TestCapsFailedMACKeepsToken (issue 24, row 12): a connection that
// fails to prove a token does not use it up: the process it was issued
// for still connects with it. (Before, the failed attempt burnt it.)
func TestCapsFailedMACKeepsToken(t *testing.T) {
	secret, err := backend.NewSecret([]byte("a deployment secret of 32 bytes."))
	if err != nil {
		t.Fatal(err)
	}
	p := newPair(t, shm.Config{Secret: secret})
	tok := token(t, p.b, os.Getpid(), os.Getuid())
	r := dialRaw(t, p.b)
	r.hello(t)
	r.auth(t, tok, make([]byte, 32))
	if code, fds := r.welcome(t); code == 0 || fds != 0 {
		t.Fatalf("wrong MAC: welcome code %d with %d fds", code, fds)
	}
	r = dialRaw(t, p.b)
	nonce := r.hello(t)
	r.auth(t, tok, secret.MAC(shm.LabelConn, tok[:], nonce, u32(uint32(os.Getpid()))))
	if code, fds := r.welcome(t); code != 0 || fds != 1 {
		t.Fatalf("the right MAC after a wrong one: welcome code %d with %d fds, want the table", code, fds)
	}
	// Used now: a replay with the right MAC fails.
	r = dialRaw(t, p.b)
	nonce = r.hello(t)
	r.auth(t, tok, secret.MAC(shm.LabelConn, tok[:], nonce, u32(uint32(os.Getpid()))))
	if code, fds := r.welcome(t); code == 0 || fds != 0 {
		t.Fatalf("replayed token: welcome code %d with %d fds", code, fds)
	}
}
