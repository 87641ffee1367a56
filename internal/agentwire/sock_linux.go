//go:build linux

package agentwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
	"golang.org/x/sys/unix"
)

// Listen listens for processes on a SOCK_SEQPACKET unix socket at path,
// with file mode perm (0660: the agent's uid and group). A socket file a
// dead agent left behind (nobody accepts on it) is replaced; a live one,
// or anything else at path, is refused. Closing the listener removes the
// file.
func Listen(path string, perm os.FileMode) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("agentwire: %s exists and is not a socket: %w", path, rdmamgr.ErrInvalid)
		}
		c, err := net.DialTimeout("unixpacket", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("agentwire: an agent already listens on %s: %w", path, syscall.EADDRINUSE)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("agentwire: stale socket %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("agentwire: stale socket: %w", err)
		}
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("agentwire: listen: %w", err)
	}
	if err := os.Chmod(path, perm); err != nil {
		l.Close()
		return nil, fmt.Errorf("agentwire: %w", err)
	}
	return l, nil
}

// Dial connects to the agent listening at path.
func Dial(ctx context.Context, path string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("agentwire: dial agent: %w", err)
	}
	return c.(*net.UnixConn), nil
}

// PeerCred returns the pid and uid of the process at the other end of c,
// as the kernel recorded them at connect (SO_PEERCRED).
func PeerCred(c *net.UnixConn) (pid int32, uid uint32, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if serr != nil {
		return 0, 0, fmt.Errorf("agentwire: SO_PEERCRED: %w", serr)
	}
	return cred.Pid, cred.Uid, nil
}

// ReadPacket reads one packet into buf (MaxPacket bytes are enough for
// any) and returns it. An empty or truncated packet, or one that carried
// file descriptors (the kernel closes them: no room is given for them),
// fails with ErrProtocol; a closed or failed socket with its error.
func ReadPacket(c *net.UnixConn, buf []byte) ([]byte, error) {
	n, _, flags, _, err := c.ReadMsgUnix(buf, nil)
	if err != nil {
		return nil, err
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) == 0 && n == 0 {
		return nil, errClosed
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return nil, fmt.Errorf("agentwire: packet truncated or with fds (%d bytes, flags %#x): %w", n, flags, rdmamgr.ErrProtocol)
	}
	return buf[:n], nil
}

// WritePacket writes pkt as one packet.
func WritePacket(c *net.UnixConn, pkt []byte) error {
	_, _, err := c.WriteMsgUnix(pkt, nil, nil)
	return err
}

// TryWritePacket writes pkt as one packet if the socket takes it without
// waiting: it returns false (and nothing is written) when the socket's
// buffer is full, so a caller that must not block hands the packet to a
// goroutine that may (WritePacket). rc is the socket's SyscallConn.
// (Sender does the same without allocating.)
func TryWritePacket(rc syscall.RawConn, pkt []byte) (bool, error) {
	s := Sender{rc: rc}
	s.f = s.send
	return s.TryWrite(pkt)
}

// Sender writes packets on one socket without waiting and without
// allocating (TryWritePacket's contract). One goroutine at a time.
type Sender struct {
	rc  syscall.RawConn
	pkt []byte
	err error
	f   func(fd uintptr) bool
}

// NewSender returns c's Sender.
func NewSender(c *net.UnixConn) (*Sender, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &Sender{rc: rc}
	s.f = s.send
	return s, nil
}

// TryWrite is TryWritePacket on the Sender's socket.
func (s *Sender) TryWrite(pkt []byte) (bool, error) {
	s.pkt = pkt
	err := s.rc.Write(s.f)
	s.pkt = nil
	if err == nil {
		err = s.err
	}
	if err == unix.EAGAIN {
		return false, nil
	}
	return err == nil, err
}

func (s *Sender) send(fd uintptr) bool {
	for {
		s.err = unix.Send(int(fd), s.pkt, unix.MSG_DONTWAIT)
		if s.err != unix.EINTR {
			return true // never wait for readiness
		}
	}
}

// Receiver reads packets from one socket into its buffer as ReadPacket
// does, without allocating (ReadPacket's ReadMsgUnix allocates the
// sender's address). One goroutine at a time; the socket's read deadline
// holds.
type Receiver struct {
	rc    syscall.RawConn
	buf   []byte
	n     int
	flags int32
	err   error
	f     func(fd uintptr) bool
	hdr   unix.Msghdr
	iov   unix.Iovec
}

// NewReceiver returns c's Receiver, reading into buf (MaxPacket bytes are
// enough for any packet).
func NewReceiver(c *net.UnixConn, buf []byte) (*Receiver, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("agentwire: receiver without a buffer: %w", rdmamgr.ErrInvalid)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &Receiver{rc: rc, buf: buf}
	r.f = r.recv
	return r, nil
}

// errClosed is a read of nothing: the peer closed its end (our protocol
// sends no empty packet, so one is taken as the end too). It wraps io.EOF:
// a peer that went is not a protocol error.
var errClosed = fmt.Errorf("agentwire: the peer closed the socket: %w", io.EOF)

// Read is ReadPacket: the next packet, valid until the next Read.
func (r *Receiver) Read() ([]byte, error) {
	r.iov.Base = &r.buf[0]
	r.iov.SetLen(len(r.buf))
	r.hdr = unix.Msghdr{Iov: &r.iov}
	r.hdr.SetIovlen(1)
	r.n, r.err = 0, nil
	err := r.rc.Read(r.f)
	r.hdr.Iov, r.iov.Base = nil, nil
	if err == nil {
		err = r.err
	}
	if err != nil {
		return nil, err
	}
	if r.flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) == 0 && r.n == 0 {
		return nil, errClosed
	}
	if r.flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return nil, fmt.Errorf("agentwire: packet truncated or with fds (%d bytes, flags %#x): %w", r.n, r.flags, rdmamgr.ErrProtocol)
	}
	return r.buf[:r.n], nil
}

func (r *Receiver) recv(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.hdr)), unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		switch e {
		case 0:
			r.n, r.flags = int(n), r.hdr.Flags
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until readable
		}
		r.err = os.NewSyscallError("recvmsg", e)
		return true
	}
}
