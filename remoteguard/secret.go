package remoteguard

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/control"
)

// Prover holds the deployment's shared secret (backend.Secret is one): it
// MACs and checks MACs, and never shows the secret.
type Prover interface {
	MAC(label string, parts ...[]byte) []byte
	Verify(mac []byte, label string, parts ...[]byte) bool
}

// WithSecret seals a control plane that runs without TLS: every gRPC
// connection, both ways, first proves the deployment secret s in a
// challenge-response handshake (secretHandshake) before gRPC speaks. A
// process without the secret never reaches protoactor: it gets no buffer,
// no queue pair, no status. With WithTLS, TLS seals the control plane and
// WithSecret is ignored.
func WithSecret(s Prover) Option {
	return func(o *options) { o.secret = s }
}

// ErrSecret: a control connection's peer did not prove the deployment
// secret (or we could not prove it to the peer).
var ErrSecret = fmt.Errorf("control connection did not prove the shared secret (do both sides use the same --secret-file?): %w", rdmamgr.ErrUnauthenticated)

// The handshake (sizes fixed, 16-byte nonces, MACs of backend.MACSize):
//
//	client → server: secretMagic, client nonce
//	server → client: secretMagic, server nonce, MAC("control server", cn, sn)
//	client → server: MAC("control client", cn, sn)
//
// Each side checks the other's MAC under the secret; the secret itself
// never crosses the wire, and fresh nonces on both sides make a recorded
// exchange useless to a replayer.
const (
	secretMagic    = "RDMC1\x00"
	secretNonceLen = 16
	secretMACLen   = 32
	// secretDialTimeout bounds the client's side when its context has
	// no deadline.
	secretDialTimeout = 10 * time.Second
)

type secretCreds struct {
	credentials.TransportCredentials // plain
	s                                Prover
	book                             *control.Book
}

func (c *secretCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// gRPC's ConnectionTimeout already set a deadline on conn.
	if err := serverProve(conn, c.s); err != nil {
		c.book.Refuse(control.RefusedSecret, "control plane refused a peer that did not prove the shared secret",
			"peer", conn.RemoteAddr().String(), "err", err.Error())
		conn.Close()
		return nil, nil, err
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c *secretCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if err := ProveSecret(ctx, conn, c.s); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return c.TransportCredentials.ClientHandshake(ctx, authority, conn)
}

func (c *secretCreds) Clone() credentials.TransportCredentials {
	return &secretCreds{TransportCredentials: c.TransportCredentials.Clone(), s: c.s, book: c.book}
}

func serverProve(conn net.Conn, s Prover) error {
	hello := make([]byte, len(secretMagic)+secretNonceLen)
	if _, err := io.ReadFull(conn, hello); err != nil {
		return fmt.Errorf("reading the secret handshake: %v: %w", err, ErrSecret)
	}
	if !bytes.Equal(hello[:len(secretMagic)], []byte(secretMagic)) {
		return fmt.Errorf("no secret handshake (a peer without --secret-file?): %w", ErrSecret)
	}
	cn := hello[len(secretMagic):]
	sn := make([]byte, secretNonceLen)
	_, _ = rand.Read(sn)
	reply := append(append([]byte(secretMagic), sn...), s.MAC("control server", cn, sn)...)
	if _, err := conn.Write(reply); err != nil {
		return fmt.Errorf("secret handshake: %v: %w", err, ErrSecret)
	}
	mac := make([]byte, secretMACLen)
	if _, err := io.ReadFull(conn, mac); err != nil {
		return fmt.Errorf("reading the secret handshake: %v: %w", err, ErrSecret)
	}
	if !s.Verify(mac, "control client", cn, sn) {
		return fmt.Errorf("wrong MAC: %w", ErrSecret)
	}
	return nil // gRPC's handshake deadline stays until its preface is read
}

// ProveSecret runs the client's side of the secret handshake on conn (a
// fresh connection to a control plane sealed with WithSecret), within
// ctx's deadline (10 s without one). The CLI runs it to say at once why a
// daemon refuses it.
func ProveSecret(ctx context.Context, conn net.Conn, s Prover) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(secretDialTimeout)
	}
	_ = conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	cn := make([]byte, secretNonceLen)
	_, _ = rand.Read(cn)
	if _, err := conn.Write(append([]byte(secretMagic), cn...)); err != nil {
		return fmt.Errorf("secret handshake: %v: %w", err, ErrSecret)
	}
	reply := make([]byte, len(secretMagic)+secretNonceLen+secretMACLen)
	if _, err := io.ReadFull(conn, reply); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("the peer closed the connection (no --secret-file there, or TLS?): %w", ErrSecret)
		}
		return fmt.Errorf("secret handshake: %v: %w", err, ErrSecret)
	}
	if !bytes.Equal(reply[:len(secretMagic)], []byte(secretMagic)) {
		return fmt.Errorf("the peer does not speak the secret handshake (no --secret-file there, or TLS?): %w", ErrSecret)
	}
	reply = reply[len(secretMagic):]
	sn := reply[:secretNonceLen]
	if !s.Verify(reply[secretNonceLen:], "control server", cn, sn) {
		return fmt.Errorf("the peer does not hold our secret: %w", ErrSecret)
	}
	if _, err := conn.Write(s.MAC("control client", cn, sn)); err != nil {
		return fmt.Errorf("secret handshake: %v: %w", err, ErrSecret)
	}
	_ = conn.SetDeadline(time.Time{})
	return nil
}

// Sealed reports whether the control plane on conn (a fresh connection)
// asks for the secret handshake: it sends our hello without a secret and
// looks for the sealed server's answer. A plain gRPC server answers with
// its settings, a TLS server with an alert; an error or no answer within
// ctx (at most 5 s) counts as not sealed. The CLI runs it to say at once
// why a sealed daemon will refuse a client without --secret-file.
func Sealed(ctx context.Context, conn net.Conn) bool {
	sealed, _ := Greet(ctx, conn)
	return sealed
}

// Greet is Sealed that also reports whether the server said nothing at
// all before closing the connection (silent): a plain gRPC server sends
// its settings and a sealed one its challenge, but a TLS server closes on
// a first record that is not a TLS handshake without a byte, so silent
// means the control plane most likely requires TLS.
func Greet(ctx context.Context, conn net.Conn) (sealed, silent bool) {
	dl := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = conn.SetDeadline(dl)
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write(append([]byte(secretMagic), make([]byte, secretNonceLen)...)); err != nil {
		return false, false
	}
	got := make([]byte, len(secretMagic))
	n, err := io.ReadFull(conn, got)
	return err == nil && bytes.Equal(got, []byte(secretMagic)), n == 0 && errors.Is(err, io.EOF)
}
