//go:build linux

package crosshost

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/test/netns"
)

// The attacker of the identity tests is this test binary run again inside
// a host (attacker runs TestAttackerHelper there): it writes to etcd or
// dials a TLS listener with what credentials it is given, and prints
// "attack ok" when the attack went through.

// attacker runs the helper in h with env (ATTACK=etcd-put, etcd-delete or
// tls; EP, KEY, VALUE; CA, CERT, TLSKEY) and returns its output and whether
// the attack went through.
func attacker(t *testing.T, h *netns.Host, env ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out proc.Buffer
	s := spec(h, &out, os.Args[0], "-test.run=^TestAttackerHelper$", "-test.v")
	s.Env = append([]string{"RDMAMGR_ATTACKER=1"}, env...)
	_ = proc.Run(ctx, s)
	return out.String(), strings.Contains(out.String(), "attack ok")
}

func TestAttackerHelper(t *testing.T) {
	if os.Getenv("RDMAMGR_ATTACKER") != "1" {
		t.Skip("run by the identity attack tests inside a host")
	}
	var cfg *tls.Config
	if ca := os.Getenv("CA"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if c := os.Getenv("CERT"); c != "" {
			pair, err := tls.LoadX509KeyPair(c, os.Getenv("TLSKEY"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
	}
	ep := os.Getenv("EP")
	switch os.Getenv("ATTACK") {
	case "etcd-put", "etcd-delete":
		if cfg == nil && strings.HasSuffix(ep, ":2379") {
			// No credentials at all: try TLS without a client
			// certificate, as well as plain.
			cfg = &tls.Config{InsecureSkipVerify: true}
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatalf("etcd: %v", err)
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if os.Getenv("ATTACK") == "etcd-put" {
			_, err = cli.Put(ctx, os.Getenv("KEY"), os.Getenv("VALUE"))
		} else {
			_, err = cli.Delete(ctx, os.Getenv("KEY"))
		}
		if err != nil {
			t.Fatalf("etcd refused: %v", err)
		}
	case "tls":
		host, _, _ := strings.Cut(ep, ":")
		cfg.ServerName = host
		cfg.NextProtos = []string{"h2"}
		c, err := tls.Dial("tcp", ep, cfg)
		if err != nil {
			t.Fatalf("tls refused: %v", err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("tls refused after the handshake: %v", err)
		}
	default:
		t.Fatalf("ATTACK=%q", os.Getenv("ATTACK"))
	}
	fmt.Println("attack ok")
}
