//go:build linux

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The TCP data protocol, spoken by hand (backend/tcp/frame.go): on a new
// data connection the daemon sends a challenge (magic, version, nonce); the
// client answers with a hello (magic, version, route token, and a MAC of
// nonce and token under the deployment secret: zero here, the test daemons
// run without one); the daemon answers with an ack (magic, version, code)
// and then serves request frames.
const (
	wireVersion    = 1
	challengeSize  = 24
	helloSize      = 72
	helloAckSize   = 8
	tokenSize      = 32
	reqHeaderSize  = 48
	respHeaderSize = 16
	opWrite        = 1
	opRead         = 2
)

// errConnClosed: the daemon closed (or reset) a raw connection.
var errConnClosed = errors.New("connection closed by the daemon")

// rawRoute runs the manager-to-manager handshake with d by hand, as an
// initiator asking for n data connections, and returns the data address and
// the single-use tokens the daemon handed out.
func rawRoute(ctx context.Context, d *daemon, n int) (addr string, tokens [][tokenSize]byte, err error) {
	return rawRouteAs(ctx, d, n, rand.Uint64()|1)
}

// rawRouteAs is rawRoute for the initiator id peer.
func rawRouteAs(ctx context.Context, d *daemon, n int, peer uint64) (addr string, tokens [][tokenSize]byte, err error) {
	info := make([]byte, 4)
	binary.LittleEndian.PutUint16(info[0:], wireVersion)
	binary.LittleEndian.PutUint16(info[2:], uint16(n))
	hs := &rdmapb.RouteHandshake{
		Version:       actor.ProtocolVersion,
		InitiatorId:   peer,
		InitiatorAddr: local.addr,
		Backend:       string(backend.KindTCP),
		Endpoint:      info,
	}
	resp, err := handshake(ctx, d, hs)
	if err != nil {
		return "", nil, err
	}
	if err := wireErr(resp.Error); err != nil {
		return "", nil, err
	}
	b := resp.Endpoint
	if len(b) < 6 || binary.LittleEndian.Uint16(b) != wireVersion {
		return "", nil, fmt.Errorf("responder info %x", b)
	}
	cnt := int(binary.LittleEndian.Uint16(b[2:]))
	al := int(binary.LittleEndian.Uint16(b[4:]))
	if cnt != n || len(b) != 6+al+cnt*tokenSize {
		return "", nil, fmt.Errorf("responder info: %d tokens, %d bytes", cnt, len(b))
	}
	addr = string(b[6 : 6+al])
	tokens = make([][tokenSize]byte, cnt)
	for i := range tokens {
		copy(tokens[i][:], b[6+al+i*tokenSize:])
	}
	return addr, tokens, nil
}

// handshake sends a RouteHandshake to d's manager and returns its answer.
func handshake(ctx context.Context, d *daemon, hs *rdmapb.RouteHandshake) (*rdmapb.RouteHandshakeResponse, error) {
	res, err := request(ctx, d, hs)
	if err != nil {
		return nil, err
	}
	resp, ok := res.(*rdmapb.RouteHandshakeResponse)
	if !ok {
		return nil, fmt.Errorf("handshake reply %T %v", res, res)
	}
	return resp, nil
}

// request sends msg to d's manager from the test's root context and waits
// for the reply.
func request(ctx context.Context, d *daemon, msg any) (any, error) {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	return local.sys.Root.RequestFuture(d.pid, msg, timeout).Result()
}

// dataConn dials a daemon's data address; the connection is closed when the
// test ends.
func dataConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial data port %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// challenge reads the daemon's challenge that opens a data connection.
func challenge(c net.Conn) error {
	var ch [challengeSize]byte
	if _, err := io.ReadFull(c, ch[:]); err != nil {
		return fmt.Errorf("read challenge: %w: %w", errConnClosed, err)
	}
	if !bytes.Equal(ch[:4], []byte("RDMT")) || binary.LittleEndian.Uint16(ch[4:]) != wireVersion || ch[6] != 0 || ch[7] != 0 {
		return fmt.Errorf("malformed challenge %x", ch)
	}
	return nil
}

// hello reads the challenge, sends a hello with version and token and
// returns the error the ack carries (nil when accepted), or errConnClosed
// when the daemon closed the connection without one.
func hello(c net.Conn, version uint16, token [tokenSize]byte) error {
	if err := challenge(c); err != nil {
		return err
	}
	var h [helloSize]byte
	copy(h[:4], "RDMT")
	binary.LittleEndian.PutUint16(h[4:], version)
	copy(h[8:], token[:])
	if _, err := c.Write(h[:]); err != nil {
		return fmt.Errorf("write hello: %w: %w", errConnClosed, err)
	}
	return readAck(c)
}

// readAck reads a hello ack: nil for code 0, the code's sentinel otherwise,
// errConnClosed if the connection ends first.
func readAck(c net.Conn) error {
	var ack [helloAckSize]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("read hello ack: %w: %w", errConnClosed, err)
	}
	if !bytes.Equal(ack[:4], []byte("RDMT")) || binary.LittleEndian.Uint16(ack[4:]) != wireVersion || ack[7] != 0 {
		return fmt.Errorf("malformed hello ack %x", ack)
	}
	if ack[6] == 0 {
		return nil
	}
	return fmt.Errorf("hello refused with code %d: %w", ack[6], wireCodeErr(ack[6]))
}

// wireCodeErr maps a data-protocol code to its sentinel.
func wireCodeErr(code byte) error {
	if s := backend.Sentinel(rdmapb.Code(code)); s != nil {
		return s
	}
	return fmt.Errorf("code %s without sentinel", rdmapb.Code(code))
}

// frame encodes a request header.
func frame(op byte, length uint32, wrid, region, offset uint64, key buffer.Key) []byte {
	b := make([]byte, reqHeaderSize)
	b[0] = op
	binary.LittleEndian.PutUint32(b[4:], length)
	binary.LittleEndian.PutUint64(b[8:], wrid)
	binary.LittleEndian.PutUint64(b[16:], region)
	binary.LittleEndian.PutUint64(b[24:], offset)
	copy(b[32:], key[:])
	return b
}

// response reads one response header (and a successful READ's payload).
// It returns the payload and the code's error, or errConnClosed.
func response(c net.Conn, wantOp byte, wantWRID uint64) ([]byte, error) {
	var h [respHeaderSize]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return nil, fmt.Errorf("read response: %w: %w", errConnClosed, err)
	}
	if h[0] != wantOp|0x80 || h[2] != 0 || h[3] != 0 || binary.LittleEndian.Uint64(h[8:]) != wantWRID {
		return nil, fmt.Errorf("unexpected response header %x", h)
	}
	n := binary.LittleEndian.Uint32(h[4:])
	if h[1] != 0 {
		if n != 0 {
			return nil, fmt.Errorf("error response with %d payload bytes", n)
		}
		return nil, fmt.Errorf("request refused with code %d: %w", h[1], wireCodeErr(h[1]))
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c, p); err != nil {
		return nil, fmt.Errorf("read payload: %w: %w", errConnClosed, err)
	}
	return p, nil
}

// expectClosed reads until the daemon closes c (EOF or reset). Any bytes the
// daemon sends first are discarded (an ack, a gRPC GOAWAY).
func expectClosed(c net.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("the daemon kept the connection open: %w", err)
	}
	return fmt.Errorf("%w (%v)", errConnClosed, err)
}
