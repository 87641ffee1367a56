//go:build linux

package agentwire

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"golang.org/x/sys/unix"
)

// Listen makes a 0660 socket that Dial reaches, with the peer's
// credentials from the kernel; packets keep their bounds; a truncated
// packet or one with fds is refused; a stale socket is replaced, a live
// one or a regular file is not; Close removes the file.
func TestSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")
	l, err := Listen(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o660 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket file: %v, %v", fi.Mode(), err)
	}
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pid, uid, err := PeerCred(s)
	if err != nil || int(pid) != os.Getpid() || int(uid) != os.Getuid() {
		t.Fatalf("PeerCred: %d %d %v", pid, uid, err)
	}
	for _, p := range [][]byte{{1, 2, 3}, {4}} {
		if err := WritePacket(c, p); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, MaxPacket)
	for _, want := range []string{"\x01\x02\x03", "\x04"} {
		if got, err := ReadPacket(s, buf); err != nil || string(got) != want {
			t.Fatalf("ReadPacket: %q, %v", got, err)
		}
	}
	// Truncated: a packet larger than the reader's buffer.
	if err := WritePacket(c, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPacket(s, buf[:4]); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("truncated packet: %v", err)
	}
	// An fd the reader did not ask for is refused (and closed by the kernel).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := c.WriteMsgUnix([]byte{1}, unix.UnixRights(int(w.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := ReadPacket(s, buf); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("packet with an fd: %v", err)
	}
	// The fd was closed on the reader's side: the pipe has no writer left.
	if n, err := r.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the pipe still has a writer: %d, %v", n, err)
	}

	if _, err := Listen(path, 0o660); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listener on a live socket: %v", err)
	}

	// A stale socket (its listener gone without removing it) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	sl, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: stale, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	sl.SetUnlinkOnClose(false)
	sl.Close()
	l2, err := Listen(stale, 0o600)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	l2.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("Close left the socket file: %v", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, 0o660); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("over a regular file: %v", err)
	}
	l.Close()
	if _, err := Dial(context.Background(), path); err == nil {
		t.Fatal("dialled a closed agent")
	}
}

// TryWritePacket writes whole packets while the socket takes them, says
// false (writing nothing) once its buffer is full, true again once the
// reader made room, and fails on a closed socket; packets keep their
// bounds and order.
func TestTryWritePacket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	l, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	pkt := make([]byte, 1000)
	sent := 0
	for ; sent < 1<<20; sent++ {
		pkt[0], pkt[1] = byte(sent), byte(sent>>8)
		ok, err := TryWritePacket(rc, pkt)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
	}
	if sent == 0 || sent == 1<<20 {
		t.Fatalf("%d packets before the socket was full", sent)
	}
	buf := make([]byte, MaxPacket)
	for i := 0; i < sent; i++ {
		got, err := ReadPacket(s, buf)
		if err != nil || len(got) != 1000 || int(got[0])|int(got[1])<<8 != i&0xffff {
			t.Fatalf("packet %d: %d bytes, %v", i, len(got), err)
		}
	}
	if ok, err := TryWritePacket(rc, pkt); !ok || err != nil {
		t.Fatalf("TryWritePacket once the reader made room: %v, %v", ok, err)
	}
	if got, err := ReadPacket(s, buf); err != nil || len(got) != 1000 {
		t.Fatalf("last packet: %d bytes, %v", len(got), err)
	}
	s.Close()
	if ok, err := TryWritePacket(rc, pkt); ok || err == nil {
		t.Fatalf("TryWritePacket on a socket whose peer closed: %v, %v", ok, err)
	}
}

// The hot path allocates nothing: a Sender's write, a Receiver's read,
// and decoding a post batch into a reused slice whose strings repeat.
func TestHotPathAllocs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	l, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snd, err := NewSender(c)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := NewReceiver(s, make([]byte, MaxPacket))
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.Start(TypePost)
	p := posts()[1]
	if err := b.AddPost(&p); err != nil {
		t.Fatal(err)
	}
	pkt := b.Packet()
	var posts []Post
	allocs := testing.AllocsPerRun(200, func() {
		if ok, err := snd.TryWrite(pkt); !ok || err != nil {
			t.Fatalf("TryWrite: %v, %v", ok, err)
		}
		got, err := rcv.Read()
		if err != nil {
			t.Fatal(err)
		}
		if posts, err = DecodePosts(got, posts); err != nil || len(posts) != 1 || posts[0].FarAgent != p.FarAgent {
			t.Fatalf("DecodePosts: %v", err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet, want 0", allocs)
	}
	// A Receiver's read keeps ReadPacket's checks: a packet larger than
	// its buffer (truncated) is refused, EOF is io.EOF (the peer went:
	// not a protocol error, as the log said before).
	small, err := NewReceiver(s, make([]byte, 4))
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePacket(c, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := small.Read(); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("Read of a truncated packet: %v", err)
	}
	c.Close()
	if _, err := rcv.Read(); !errors.Is(err, io.EOF) || errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("Read at EOF: %v, want io.EOF", err)
	}
}

// BenchmarkPacketRoundTrip is an 8-byte packet there and back over the
// attach socket between two goroutines (each read waits in the poller):
// the floor of what the hop between a process and its agent adds to an
// operation (one such round trip per operation: a post there, a done back).
//
//	go test -run - -bench PacketRoundTrip ./internal/agentwire
func BenchmarkPacketRoundTrip(b *testing.B) {
	path := filepath.Join(b.TempDir(), "agent.sock")
	l, err := Listen(path, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	c, err := Dial(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := l.AcceptUnix()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	go func() { // echo
		r, _ := NewReceiver(s, make([]byte, MaxPacket))
		for {
			p, err := r.Read()
			if err != nil || WritePacket(s, p) != nil {
				return
			}
		}
	}()
	r, _ := NewReceiver(c, make([]byte, MaxPacket))
	snd, _ := NewSender(c)
	pkt := make([]byte, 8)
	b.ResetTimer()
	for range b.N {
		if ok, err := snd.TryWrite(pkt); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if _, err := r.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
