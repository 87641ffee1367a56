//go:build !linux

package agentwire

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/rdmamgr/rdmamgr"
)

var errPlatform = fmt.Errorf("agentwire: host agents need Linux: %w", rdmamgr.ErrNotSupported)

// Listen fails: host agents need Linux.
func Listen(path string, perm os.FileMode) (*net.UnixListener, error) { return nil, errPlatform }

// Dial fails: host agents need Linux.
func Dial(ctx context.Context, path string) (*net.UnixConn, error) { return nil, errPlatform }

// PeerCred fails: host agents need Linux.
func PeerCred(c *net.UnixConn) (pid int32, uid uint32, err error) { return 0, 0, errPlatform }

// ReadPacket fails: host agents need Linux.
func ReadPacket(c *net.UnixConn, buf []byte) ([]byte, error) { return nil, errPlatform }

// WritePacket fails: host agents need Linux.
func WritePacket(c *net.UnixConn, pkt []byte) error { return errPlatform }

// TryWritePacket fails: host agents need Linux.
func TryWritePacket(rc syscall.RawConn, pkt []byte) (bool, error) { return false, errPlatform }

// Sender fails: host agents need Linux.
type Sender struct{}

// NewSender fails: host agents need Linux.
func NewSender(c *net.UnixConn) (*Sender, error) { return nil, errPlatform }

// TryWrite fails: host agents need Linux.
func (s *Sender) TryWrite(pkt []byte) (bool, error) { return false, errPlatform }

// Receiver fails: host agents need Linux.
type Receiver struct{}

// NewReceiver fails: host agents need Linux.
func NewReceiver(c *net.UnixConn, buf []byte) (*Receiver, error) { return nil, errPlatform }

// Read fails: host agents need Linux.
func (r *Receiver) Read() ([]byte, error) { return nil, errPlatform }
