//go:build linux

package shm_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/testscale"
)

// timeout bounds the waits of the tests (a hang guard, scaled for -race
// and load).
var timeout = testscale.Timeout(30 * time.Second)

// pair is two shm backends and a route from A to B.
type pair struct {
	a, b       *shm.Backend
	regA, regB *memreg.Registry
	route      backend.Route
}

func newPair(t *testing.T, cfg shm.Config) *pair {
	t.Helper()
	p := &pair{}
	p.a, p.regA = newBackend(t, backendtest.OwnerA, cfg)
	backendtest.CloseAtCleanup(t, timeout, p.a, p.regA)
	p.b, p.regB = newBackend(t, backendtest.OwnerB, cfg)
	backendtest.CloseAtCleanup(t, timeout, p.b, p.regB)
	p.route = backendtest.MustConnect(t, timeout, p.a, p.b, backendtest.OwnerB, backendtest.OwnerA)
	return p
}

// do runs one operation on the pair's route.
func (p *pair) do(t *testing.T, op backend.Op, local, remote buffer.Buffer) error {
	t.Helper()
	return backendtest.Do(t, timeout, p.route, p.regA, op, local, remote)
}

// rawConn is a hand-driven connection to an owner's socket.
type rawConn struct {
	c        *net.UnixConn
	buf, oob []byte
}

func dialRaw(t *testing.T, b *shm.Backend) *rawConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: b.Addr(), Net: "unixpacket"})
	if err != nil {
		t.Fatalf("dial %s: %v", b.Addr(), err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, buf: make([]byte, 512), oob: make([]byte, 64)}
}

// read returns the next message and the fds it carried (closed at the
// end of the test); io errors are returned.
func (r *rawConn) read() ([]byte, []int, error) {
	r.c.SetReadDeadline(time.Now().Add(timeout))
	n, oobn, _, _, err := r.c.ReadMsgUnix(r.buf, r.oob)
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(r.oob[:oobn]); err == nil {
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	if n == 0 {
		return nil, fds, errors.New("EOF")
	}
	return append([]byte(nil), r.buf[:n]...), fds, nil
}

func (r *rawConn) write(t *testing.T, p []byte) {
	t.Helper()
	if _, _, err := r.c.WriteMsgUnix(p, nil, nil); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// hello reads the owner's hello and returns its nonce.
func (r *rawConn) hello(t *testing.T) []byte {
	t.Helper()
	m, _, err := r.read()
	if err != nil || len(m) != 2+backend.NonceSize || m[0] != shm.MsgHello {
		t.Fatalf("hello: %x, %v", m, err)
	}
	return m[2:]
}

// auth sends credentials: token and MAC (nil: none).
func (r *rawConn) auth(t *testing.T, token [shm.TokenSize]byte, mac []byte) {
	t.Helper()
	msg := append([]byte{shm.MsgAuth}, token[:]...)
	r.write(t, append(append(msg, byte(len(mac))), mac...))
}

// welcome reads the owner's answer to the credentials: its code (0: OK)
// and how many fds came with it; an owner that hung up gives -1.
func (r *rawConn) welcome(t *testing.T) (code int, fds int) {
	t.Helper()
	m, f, err := r.read()
	if err != nil {
		return -1, len(f)
	}
	if len(m) != 9 || m[0] != shm.MsgWelcome {
		t.Fatalf("welcome: %x", m)
	}
	return int(m[1]) | int(m[2])<<8, len(f)
}

// token has b accept a route for a process pid of uid and returns the
// token of its answer.
func token(t *testing.T, b *shm.Backend, pid, uid int) [shm.TokenSize]byte {
	t.Helper()
	ans, err := b.AcceptRoute(context.Background(), backendtest.OwnerA, shm.EncodeInfo(uint32(pid), uint32(uid)))
	if err != nil {
		t.Fatalf("AcceptRoute: %v", err)
	}
	_, tok, err := shm.DecodeAnswer(ans)
	if err != nil {
		t.Fatalf("answer: %v", err)
	}
	return tok
}

// authed is a raw connection that passed authentication (no secret).
func authed(t *testing.T, b *shm.Backend) *rawConn {
	t.Helper()
	r := dialRaw(t, b)
	r.hello(t)
	r.auth(t, token(t, b, os.Getpid(), os.Getuid()), nil)
	if code, fds := r.welcome(t); code != 0 || fds != 1 {
		t.Fatalf("welcome code %d with %d fds, want 0 with the table", code, fds)
	}
	return r
}

// waitAuthFail waits until b counted n authentication failures.
func waitAuthFail(t *testing.T, b *shm.Backend, n uint64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for b.Served().AuthFail < n {
		if time.Now().After(deadline) {
			t.Fatalf("auth failures %d, want %d", b.Served().AuthFail, n)
		}
		time.Sleep(time.Millisecond)
	}
}
