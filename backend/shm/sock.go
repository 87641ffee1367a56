//go:build linux

package shm

import (
	"fmt"
	"net"

	"github.com/rdmamgr/rdmamgr"
	"golang.org/x/sys/unix"
)

// packet is one message read from the socket, with the fd it carried
// (-1: none). The reader owns the fd.
type packet struct {
	b  []byte
	fd int
}

// readPacket reads one message. Any fd beyond the first, and any fd the
// message type does not expect, is the caller's to close (closeFD).
func readPacket(c *net.UnixConn, buf, oob []byte) (packet, error) {
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return packet{fd: -1}, err
	}
	p := packet{b: buf[:n], fd: -1}
	fds := parseFDs(oob[:oobn])
	if len(fds) > 0 {
		p.fd = fds[0]
		for _, fd := range fds[1:] {
			unix.Close(fd)
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n == 0 {
		p.close()
		return packet{fd: -1}, fmt.Errorf("shm: message truncated or empty (%d bytes, flags %#x): %w", n, flags, rdmamgr.ErrProtocol)
	}
	return p, nil
}

// close closes the packet's fd, if any.
func (p *packet) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

func parseFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// writePacket sends one message, with fd when fd >= 0.
func writePacket(c *net.UnixConn, b []byte, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	_, _, err := c.WriteMsgUnix(b, oob, nil)
	return err
}

// tryWritePacket sends one message without fds if the socket has room
// now (MSG_DONTWAIT), else fails with EAGAIN.
func tryWritePacket(c *net.UnixConn, b []byte) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.Sendmsg(int(fd), b, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	}); err != nil {
		return err
	}
	return serr
}

// oobSize fits one fd's control message.
var oobSize = unix.CmsgSpace(4)

// peerCred returns the pid and uid of the process at the other end.
func peerCred(c *net.UnixConn) (pid int32, uid uint32, err error) {
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
		return 0, 0, serr
	}
	return cred.Pid, cred.Uid, nil
}
