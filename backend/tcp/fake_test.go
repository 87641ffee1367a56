package tcp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// fakeServer is a hand-driven responder speaking the data protocol of
// frame.go: it acknowledges any hello and then lets the test read request
// frames and answer them (or not) as it likes.
type fakeServer struct {
	ln    net.Listener
	conns chan *fakeConn
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	mu  sync.Mutex
	all []net.Conn
}

type fakeConn struct {
	c  net.Conn
	br *bufio.Reader
}

func newFakeServer(t testing.TB) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	f := &fakeServer{ln: ln, conns: make(chan *fakeConn, maxConns), done: make(chan struct{})}
	f.wg.Add(1)
	go f.acceptLoop()
	t.Cleanup(f.close)
	return f
}

func (f *fakeServer) acceptLoop() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.all = append(f.all, c)
		f.mu.Unlock()
		var hello [helloSize]byte
		_ = c.SetDeadline(time.Now().Add(waitTimeout))
		var ch [challengeSize]byte
		encodeChallenge(ch[:], [16]byte{1})
		if _, err := c.Write(ch[:]); err != nil {
			c.Close()
			continue
		}
		if _, err := io.ReadFull(c, hello[:]); err != nil {
			c.Close()
			continue
		}
		if _, _, err := decodeHello(hello[:]); err != nil {
			c.Close()
			continue
		}
		var ack [helloAckSize]byte
		encodeHelloAck(ack[:], 0)
		if _, err := c.Write(ack[:]); err != nil {
			c.Close()
			continue
		}
		_ = c.SetDeadline(time.Time{})
		select {
		case f.conns <- &fakeConn{c: c, br: bufio.NewReader(c)}:
		case <-f.done:
			return
		}
	}
}

// close stops the fake server and waits for it. Idempotent.
func (f *fakeServer) close() {
	f.once.Do(func() {
		close(f.done)
		f.ln.Close()
		f.mu.Lock()
		for _, c := range f.all {
			c.Close()
		}
		f.mu.Unlock()
	})
	f.wg.Wait()
}

// info is responder info pointing at the fake server with n tokens.
func (f *fakeServer) info(n int) []byte {
	tokens := make([][tokenSize]byte, n)
	for i := range tokens {
		tokens[i] = testToken(byte(i))
	}
	return encodeResponderInfo(f.ln.Addr().String(), tokens)
}

// connect opens a route from a to the fake server; closed at cleanup.
func (f *fakeServer) connect(t testing.TB, a *Backend) backend.Route {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pending, info, err := a.PrepareRoute(ctx, backendtest.OwnerB)
	if err != nil {
		t.Fatalf("PrepareRoute: %v", err)
	}
	n, err := decodeInitiatorInfo(info)
	if err != nil {
		t.Fatalf("initiator info: %v", err)
	}
	rt, err := pending.Complete(ctx, f.info(n))
	if err != nil {
		t.Fatalf("Complete to fake server: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// accept returns the next authenticated connection.
func (f *fakeServer) accept(t testing.TB) *fakeConn {
	t.Helper()
	select {
	case c := <-f.conns:
		return c
	case <-time.After(waitTimeout):
		t.Fatalf("fake server: no connection")
		return nil
	}
}

// fakeRemote is a remote handle as the fake server's peer would hand it out.
func fakeRemote(n uint64) buffer.Buffer {
	return buffer.Buffer{OwnerID: backendtest.OwnerB, Region: 1, Length: n, Key: testKey(), Access: buffer.AccessReadWrite}
}

func (fc *fakeConn) tryReadReq() (reqHeader, error) {
	var b [reqMaxSize]byte
	var h reqHeader
	_ = fc.c.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := io.ReadFull(fc.br, b[:reqHeaderSize]); err != nil {
		return h, fmt.Errorf("fake server: read request: %w", err)
	}
	n := reqSizeOf(b[0], b[1])
	if _, err := io.ReadFull(fc.br, b[reqHeaderSize:n]); err != nil {
		return h, fmt.Errorf("fake server: read request operands: %w", err)
	}
	if err := h.decode(b[:n], 1<<30); err != nil {
		return h, fmt.Errorf("fake server: %w", err)
	}
	return h, nil
}

func (fc *fakeConn) readReq(t testing.TB) reqHeader {
	t.Helper()
	h, err := fc.tryReadReq()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (fc *fakeConn) tryReadPayload(n int) ([]byte, error) {
	p := make([]byte, n)
	_ = fc.c.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := io.ReadFull(fc.br, p); err != nil {
		return nil, fmt.Errorf("fake server: read payload: %w", err)
	}
	return p, nil
}

func (fc *fakeConn) readPayload(t testing.TB, n int) []byte {
	t.Helper()
	p, err := fc.tryReadPayload(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// respond writes a response header (h.encode) followed by payload, which
// may be shorter than h.length to cut a transfer short.
func (fc *fakeConn) respond(t testing.TB, h respHeader, payload []byte) {
	t.Helper()
	b := make([]byte, h.size(), h.size()+len(payload))
	h.encode(b)
	fc.writeRaw(t, append(b, payload...))
}

func (fc *fakeConn) writeRaw(t testing.TB, b []byte) {
	t.Helper()
	_ = fc.c.SetWriteDeadline(time.Now().Add(waitTimeout))
	if _, err := fc.c.Write(b); err != nil {
		t.Fatalf("fake server: write: %v", err)
	}
}
