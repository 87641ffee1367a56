//go:build linux

package hostagent

import (
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// Close does not wait out the handshake of a connection that says
// nothing: the handshake ends with the agent's life, not only at
// handshakeTimeout (a local process could hold Close that long).
func TestCloseDuringHandshake(t *testing.T) {
	old := handshakeTimeout
	handshakeTimeout = time.Hour
	t.Cleanup(func() { handshakeTimeout = old })
	a := startAgent(t, newSystem(t), "agentA", 1, testSecret(t))
	c, err := agentwire.Dial(testCtx(t), a.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, agentwire.MaxPacket)
	if _, err := agentwire.ReadPacket(c, buf); err != nil { // the hello: in its handshake
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testTimeout):
		c.Close() // let Close end, for the cleanup
		<-closed
		t.Fatal("Close waits for a silent process's handshake")
	}
}
