package tcp

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// tlsBufPair returns a client tlsBufConn (as dial builds it) and the TLS
// server end it talks to, both over loopback with small socket buffers,
// so that a peer that does not read stalls a write within a few hundred KiB.
func tlsBufPair(t *testing.T) (*tlsBufConn, *tls.Conn) {
	t.Helper()
	creds := tlsCreds(t)
	c, sc := loopbackPair(t)
	_ = sc.(*net.TCPConn).SetReadBuffer(32 << 10)
	_ = c.(*net.TCPConn).SetWriteBuffer(32 << 10)
	srv := tls.Server(sc, creds.Server)
	t.Cleanup(func() { srv.Close() })
	cfg := creds.Client.Clone()
	cfg.ServerName = "127.0.0.1"
	raw := &rawConn{Conn: c}
	tc := tls.Client(raw, cfg)
	hs := make(chan error, 1)
	go func() { hs <- srv.Handshake() }()
	_ = tc.SetDeadline(time.Now().Add(waitTimeout))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-hs; err != nil {
		t.Fatal(err)
	}
	_ = tc.SetDeadline(time.Time{})
	w := newTLSBufConn(tc, raw)
	t.Cleanup(func() { w.Close() })
	return w, srv
}

// A write that a deadline cuts short, against a peer that does not read,
// returns os.ErrDeadlineExceeded with what it took consumed from its
// buffers; the caller's memory is not read again after it returns; and the
// same connection then goes on: the peer reads exactly the bytes taken
// and then the rest, in order, with no corrupt record (a *tls.Conn's
// timed-out write fails every later one).
func TestTLSCutWriteGoesOn(t *testing.T) {
	for _, pieces := range []struct {
		name  string
		sizes []int
	}{
		{"large", []int{64, 600 << 10, 100, 70 << 10}},
		{"small", repeatInts(48, 15000)},
	} {
		t.Run(pieces.name, func(t *testing.T) {
			w, srv := tlsBufPair(t)
			var v net.Buffers
			var want []byte
			for _, n := range pieces.sizes {
				b := make([]byte, n)
				backendtest.Random(t, b)
				v = append(v, b)
				want = append(want, b...)
			}
			orig := append(net.Buffers(nil), v...)
			_ = w.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := w.WriteBuffers(&v)
			if !errors.Is(err, os.ErrDeadlineExceeded) || !isTimeout(err) {
				t.Fatalf("write to a peer that does not read: n=%d err=%v, want a deadline", n, err)
			}
			if left := remaining(v); int(n)+left != len(want) || n == 0 {
				t.Fatalf("took %d, %d left in the buffers: want %d in all, some taken", n, left, len(want))
			}
			// What was taken is the caller's again: scribble over it (want
			// is a copy: the peer must read the bytes as they were).
			var scribbled int64
			for _, b := range orig {
				for i := range b {
					if scribbled >= n {
						break
					}
					b[i] ^= 0xff
					scribbled++
				}
			}
			got := make(chan []byte, 1)
			go func() {
				_ = srv.SetReadDeadline(time.Now().Add(waitTimeout))
				b := make([]byte, len(want))
				k, _ := io.ReadFull(srv, b)
				got <- b[:k]
			}()
			_ = w.SetWriteDeadline(time.Now().Add(waitTimeout))
			if _, err := w.WriteBuffers(&v); err != nil {
				t.Fatalf("the write after the cut: %v", err)
			}
			if b := <-got; !bytes.Equal(b, want) {
				t.Fatalf("the peer read %d bytes, want %d: first difference at %d", len(b), len(want), firstDiff(b, want))
			}
		})
	}
}

// A cut write's kept record leaves with drain, before Close.
func TestTLSDrainSendsTheCutRecord(t *testing.T) {
	w, srv := tlsBufPair(t)
	p := make([]byte, 1<<20)
	backendtest.Random(t, p)
	_ = w.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := w.Write(p)
	if !isTimeout(err) || n == 0 || n == len(p) {
		t.Fatalf("write to a peer that does not read: n=%d err=%v, want part of it and a deadline", n, err)
	}
	if !w.raw.dirty.Load() {
		t.Fatal("nothing kept after a cut: this test needs a cut mid-record")
	}
	got := make(chan []byte, 1)
	go func() {
		_ = srv.SetReadDeadline(time.Now().Add(waitTimeout))
		b, _ := io.ReadAll(srv)
		got <- b
	}()
	w.drain(waitTimeout)
	w.Close()
	if b := <-got; !bytes.Equal(b, p[:n]) {
		t.Fatalf("the peer read %d bytes, want the %d taken: first difference at %d", len(b), n, firstDiff(b, p[:n]))
	}
}

// Close returns at once, twice, while a record is kept for a peer that
// does not read (no close_notify to wait for).
func TestTLSCloseDoesNotWaitForThePeer(t *testing.T) {
	w, _ := tlsBufPair(t)
	_ = w.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := w.Write(make([]byte, 1<<20)); !isTimeout(err) {
		t.Fatalf("write to a peer that does not read: %v, want a deadline", err)
	}
	done := make(chan struct{})
	go func() {
		w.Close()
		w.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("Close waited for the peer")
	}
	if _, err := w.Write([]byte{1}); err == nil {
		t.Fatal("a write after Close succeeded")
	}
}

// A deadline that cuts the batch's last record (a cancel, client
// writeBatch; a cut's grace, server writeBatch) leaves every byte of the
// iov taken and the rest of that record's ciphertext kept. The callers
// then go on as after any interrupted write: clear or renew the deadline
// and call writeIOV again, with what is left: nothing. That call returns
// nil, so the batch is out as far as the caller knows, and the server goes
// back to reading, the client to waiting for answers: the kept ciphertext
// must reach the peer then, not whenever the next write comes (a
// heartbeat ping, a second later).
func TestTLSCutLastRecordReachesPeer(t *testing.T) {
	w, srv := tlsBufPair(t)
	p := make([]byte, 100)
	backendtest.Random(t, p)
	v := net.Buffers{p[:40], p[40:]}
	// The deadline passed as the batch's only record goes out (cancel.go
	// sets it to now; a cut's grace may end just then).
	_ = w.SetWriteDeadline(time.Now())
	n, err := writeIOV(w, &v)
	if !isTimeout(err) || n != int64(len(p)) || len(v) != 0 {
		t.Fatalf("the cut write: n=%d err=%v, %d pieces left: want all %d taken and a deadline", n, err, len(v), len(p))
	}
	// unloan / cutLeft: the deadline goes, the batch goes on.
	_ = w.SetWriteDeadline(time.Time{})
	if n, err := writeIOV(w, &v); n != 0 || err != nil {
		t.Fatalf("the rest of the batch (nothing): n=%d err=%v", n, err)
	}
	_ = srv.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, len(p))
	k, err := io.ReadFull(srv, got)
	if err != nil || !bytes.Equal(got, p) {
		t.Fatalf("the peer read %d of the %d bytes the batch's write reported taken (err %v); %d bytes of ciphertext still kept in rawConn after writeIOV returned nil",
			k, len(p), err, pendingLen(w))
	}
}

func pendingLen(w *tlsBufConn) int {
	w.raw.mu.Lock()
	defer w.raw.mu.Unlock()
	return len(w.raw.pending)
}

func repeatInts(n, times int) []int {
	s := make([]int, times)
	for i := range s {
		s[i] = n
	}
	return s
}

func remaining(v net.Buffers) int {
	n := 0
	for _, b := range v {
		n += len(b)
	}
	return n
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
