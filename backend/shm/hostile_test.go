//go:build linux

package shm_test

import (
	"crypto/rand"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestHostileHandshake: connections that do not prove themselves get no
// state table and no memory, are counted, and the owner keeps serving.
func TestHostileHandshake(t *testing.T) {
	defer shm.SetHandshakeTimeout(200 * time.Millisecond)()
	secret, err := backend.NewSecret([]byte("a deployment secret of 32 bytes."))
	if err != nil {
		t.Fatal(err)
	}
	p := newPair(t, shm.Config{Secret: secret})
	var fails uint64
	refused := func(name string, r *rawConn) {
		t.Helper()
		code, fds := r.welcome(t)
		if code == 0 || fds != 0 {
			t.Fatalf("%s: welcome code %d with %d fds, want a refusal without fds", name, code, fds)
		}
		fails++
		waitAuthFail(t, p.b, fails)
	}

	// No credentials at all: the owner hangs up after its timeout.
	r := dialRaw(t, p.b)
	r.hello(t)
	refused("silent peer", r)

	// Garbage instead of credentials.
	r = dialRaw(t, p.b)
	r.hello(t)
	r.write(t, []byte{shm.MsgAuth, 1, 2, 3})
	refused("malformed credentials", r)

	// A token nobody issued.
	var forged [shm.TokenSize]byte
	rand.Read(forged[:])
	r = dialRaw(t, p.b)
	nonce := r.hello(t)
	r.auth(t, forged, secret.MAC(shm.LabelConn, forged[:], nonce, u32(uint32(os.Getpid()))))
	refused("forged token", r)

	// A real token without the secret's MAC.
	tok := token(t, p.b, os.Getpid(), os.Getuid())
	r = dialRaw(t, p.b)
	r.hello(t)
	r.auth(t, tok, make([]byte, 32))
	refused("wrong MAC", r)

	// A real token and MAC, but the route claimed another process.
	tok = token(t, p.b, os.Getpid()+1, os.Getuid())
	r = dialRaw(t, p.b)
	nonce = r.hello(t)
	r.auth(t, tok, secret.MAC(shm.LabelConn, tok[:], nonce, u32(uint32(os.Getpid()+1))))
	refused("wrong pid", r)

	// A replay of that token from this process fails on the pid again (a
	// refused attempt leaves the token to the process it was issued for).
	r = dialRaw(t, p.b)
	nonce = r.hello(t)
	r.auth(t, tok, secret.MAC(shm.LabelConn, tok[:], nonce, u32(uint32(os.Getpid()+1))))
	refused("replayed token", r)

	checkServes(t, p)
}

// TestHostileWrongUID: a process of another user holding a valid token
// and the secret is refused by its credentials (SO_PEERCRED), at accept:
// it gets no hello, no goroutine and no handshake of the owner's.
func TestHostileWrongUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to connect as another uid")
	}
	p := newPair(t, shm.Config{})
	tok := token(t, p.b, os.Getpid(), os.Getuid())
	res := make(chan [2]int, 1)
	go func() {
		// This goroutine's thread takes uid 65534 for good: it stays
		// locked, so the thread exits with the goroutine.
		runtime.LockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			res <- [2]int{-2, int(e)}
			return
		}
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: p.b.Addr(), Net: "unixpacket"})
		if err != nil {
			res <- [2]int{-3, 0}
			return
		}
		r := &rawConn{c: c, buf: make([]byte, 512), oob: make([]byte, 64)}
		m, fds, err := r.read()
		if err == nil && len(m) > 0 && m[0] == shm.MsgHello { // not expected: play on
			r.auth(t, tok, nil)
			_, fds, err = r.read()
		}
		c.Close()
		got := 0
		if err == nil {
			got = 1
		}
		res <- [2]int{got, len(fds)}
	}()
	got := <-res
	switch {
	case got[0] == -2:
		t.Fatalf("setresuid: errno %d", got[1])
	case got[0] == -3:
		t.Fatal("peer of uid 65534 could not dial")
	case got[0] != 0 || got[1] != 0:
		t.Fatalf("peer of uid 65534 got an answer (%d fds): want the connection closed at accept", got[1])
	}
	waitAuthFail(t, p.b, 1)
	checkServes(t, p)
}

// TestHostileMapRequests: an authenticated peer gets a region's memfd only
// with its key and the access it asks for; malformed requests end its
// connection, not the owner.
func TestHostileMapRequests(t *testing.T) {
	p := newPair(t, shm.Config{})
	h, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessRead)
	r := authed(t, p.b)
	var wrong [16]byte
	rand.Read(wrong[:])
	for _, tc := range []struct {
		name   string
		region uint64
		key    [16]byte
		need   byte
		ok     bool
	}{
		{"forged region id", h.Region + 1000, h.Key, 1, false},
		{"wrong key", h.Region, wrong, 1, false},
		{"write to a read-only region", h.Region, h.Key, byte(buffer.AccessWrite), false},
		{"the real thing", h.Region, h.Key, byte(buffer.AccessRead), true},
	} {
		r.write(t, shm.EncodeMap(7, tc.region, tc.key, tc.need))
		m, fds, err := r.read()
		if err != nil || len(m) < 13 || m[0] != shm.MsgMapped {
			t.Fatalf("%s: reply %x, %v", tc.name, m, err)
		}
		code := int(m[9])
		if (code == 0) != tc.ok || (len(fds) == 1) != tc.ok {
			t.Fatalf("%s: code %d with %d fds, want ok=%v", tc.name, code, len(fds), tc.ok)
		}
	}
	r.write(t, []byte{shm.MsgMap, 1})
	if _, _, err := r.read(); err == nil {
		t.Fatal("a malformed request did not end the connection")
	}
	checkServes(t, p)
}

// TestKeepsCopyingAfterRevoke: a peer that mapped a region and keeps
// putting into it is refused from the moment Revoke returns, and no byte
// of it lands afterwards.
func TestKeepsCopyingAfterRevoke(t *testing.T) {
	p := newPair(t, shm.Config{})
	const n = 64 << 10
	hb, lb := backendtest.Alloc(t, p.regB, n, buffer.AccessReadWrite)
	ha, la := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
	for i := range la {
		la[i] = 0xAA
	}
	if err := p.do(t, backend.OpWrite, ha, hb); err != nil { // mapped now
		t.Fatalf("first put: %v", err)
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		var last error
		for i := 0; i < 200000; i++ {
			select {
			case <-stop:
				done <- last
				return
			default:
			}
			last = backendtest.Do(t, timeout, p.route, p.regA, backend.OpWrite, ha, hb)
		}
		done <- last
	}()
	time.Sleep(20 * time.Millisecond)
	if err := p.regB.Revoke(t.Context(), hb); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	for i := range lb {
		lb[i] = 0x55 // the owner's own use goes on
	}
	time.Sleep(50 * time.Millisecond) // the peer keeps trying meanwhile
	close(stop)
	if err := <-done; !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("put after Revoke: %v, want ErrRevoked", err)
	}
	if i := backendtest.FirstDiff(lb, bytesOf(0x55, n)); i >= 0 {
		t.Fatalf("byte %d of the revoked region changed after Revoke returned", i)
	}
}

// TestLease: a mapped region's lease is checked on every copy, and a new
// lease reaches a peer that mapped it already.
func TestLease(t *testing.T) {
	p := newPair(t, shm.Config{})
	hb, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	ha, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	if err := p.regB.SetLease(hb, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := p.do(t, backend.OpRead, ha, hb); err != nil {
		t.Fatalf("get under a lease: %v", err)
	}
	if err := p.regB.SetLease(hb, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := p.do(t, backend.OpRead, ha, hb); err != nil {
		t.Fatalf("get under the shortened lease: %v", err)
	}
	time.Sleep(60 * time.Millisecond)
	if err := p.do(t, backend.OpRead, ha, hb); !errors.Is(err, rdmamgr.ErrExpired) {
		t.Fatalf("get after the lease ran out: %v, want ErrExpired", err)
	}
}

// TestCallerMemory: a region registered in place is not in a memfd; its
// operations go over the fallback route, and without one they fail with
// ErrNotShareable.
func TestCallerMemory(t *testing.T) {
	p := newPair(t, shm.Config{})
	// Anonymous memory: caller memory that is not a memfd (and, unlike the
	// Go heap, not watched by the race detector, which cannot see the
	// ordering the fallback's TCP responses give).
	mem, err := unix.Mmap(-1, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	hb, err := p.regB.Register(mem, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	ha, la := backendtest.Alloc(t, p.regA, len(mem), buffer.AccessReadWrite)
	backendtest.Random(t, la)
	for range 3 {
		if err := p.do(t, backend.OpWrite, ha, hb); err != nil {
			t.Fatalf("put into caller memory: %v", err)
		}
	}
	backendtest.AssertSame(t, "caller memory after put", mem, la)

	a, regA := newBackend(t, 0xA2, shm.Config{})
	backendtest.CloseAtCleanup(t, timeout, a, regA)
	noFB, err := shm.New(shm.Config{}, regA, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := noFB.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noFB.Close() })
	rt := backendtest.MustConnect(t, timeout, noFB, p.b, backendtest.OwnerB, 0xA2)
	h2, _ := backendtest.Alloc(t, regA, len(mem), buffer.AccessReadWrite)
	err = backendtest.Do(t, timeout, rt, regA, backend.OpRead, h2, hb)
	if !errors.Is(err, shm.ErrNotShareable) || !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("get of caller memory without a fallback: %v, want ErrNotShareable", err)
	}
}

// checkServes moves bytes both ways on a fresh route.
func checkServes(t *testing.T, p *pair) {
	t.Helper()
	rt := backendtest.MustConnect(t, timeout, p.a, p.b, backendtest.OwnerB, backendtest.OwnerA)
	backendtest.CheckRoute(t, timeout, rt, p.regA, p.regB)
}

func u32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

func bytesOf(b byte, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = b
	}
	return p
}
