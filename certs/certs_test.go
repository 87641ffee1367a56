package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// handshake runs a TLS handshake between client and server over a pipe;
// serverName is what the client dialled.
func handshake(t *testing.T, client, server *tls.Config, serverName string) (clientErr, serverErr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	cc := client.Clone()
	cc.ServerName = serverName
	sc := tls.Server(b, server)
	errs := make(chan error, 1)
	go func() {
		_ = sc.SetDeadline(time.Now().Add(2 * time.Second))
		err := sc.Handshake()
		if err == nil {
			_, err = sc.Read(make([]byte, 1)) // the client's verdict in TLS 1.3
		}
		errs <- err
		sc.Close()
	}()
	c := tls.Client(a, cc)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	clientErr = c.Handshake()
	if clientErr == nil {
		_, clientErr = c.Write([]byte{1})
		if clientErr == nil {
			_, clientErr = c.Read(make([]byte, 1))
			if errors.Is(clientErr, net.ErrClosed) || clientErr != nil && clientErr.Error() == "EOF" {
				clientErr = nil
			}
		}
	}
	c.Close()
	return clientErr, <-errs
}

func issue(t *testing.T, ca *CA, name string, hosts ...string) *Credentials {
	t.Helper()
	cr, err := ca.Credentials(name, hosts)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

func TestMutualTLS(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	h1 := issue(t, ca, "h1", "10.212.0.1")
	h2 := issue(t, ca, "h2", "10.212.0.2")
	stranger := issue(t, other, "h2", "10.212.0.2")
	noClientCert := h2.Client.Clone()
	noClientCert.Certificates = nil

	cases := []struct {
		name   string
		client *tls.Config
		dial   string
		ok     bool
	}{
		{"same CA, dialled address in the certificate", h2.Client, "10.212.0.1", true},
		{"same CA, loopback", h2.Client, "127.0.0.1", true},
		{"same CA, address not in the certificate", h2.Client, "10.212.0.9", false},
		{"client of another CA", stranger.Client, "10.212.0.1", false},
		{"client without a certificate", noClientCert, "10.212.0.1", false},
		{"member h1 asked for, h1 reached", RequireName(h2.Client, "h1"), "10.212.0.1", true},
		{"member h3 asked for, h1 reached", RequireName(h2.Client, "h3"), "10.212.0.1", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cerr, serr := handshake(t, c.client, h1.Server, c.dial)
			if c.ok && (cerr != nil || serr != nil) {
				t.Fatalf("refused: client %v, server %v", cerr, serr)
			}
			if !c.ok && cerr == nil && serr == nil {
				t.Fatal("accepted")
			}
		})
	}
	if h1.Server.MinVersion != tls.VersionTLS13 || h1.Client.MinVersion != tls.VersionTLS13 {
		t.Error("not TLS 1.3 only")
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	again, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cert.Equal(ca.Cert) {
		t.Fatal("loaded CA differs")
	}
	cf, kf, err := again.IssueFiles(dir, "h1", []string{"10.212.0.1", "h1.example"})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := Load(filepath.Join(dir, CACertFile), cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(creds.Server.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("10.212.0.1"); err != nil {
		t.Error(err)
	}
	if err := leaf.VerifyHostname("h1.example"); err != nil {
		t.Error(err)
	}
	if _, err := Load(filepath.Join(dir, CACertFile), cf, ""); err == nil {
		t.Error("Load without a key worked")
	}
}

// A client certificate used from an address it does not name is refused
// at the server's handshake (loopback is in every certificate issued).
func TestCertBoundToHost(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	h1 := issue(t, ca, "h1", "10.212.0.1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errs := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errs <- err
			return
		}
		defer c.Close()
		sc := tls.Server(c, h1.Server)
		_ = sc.SetDeadline(time.Now().Add(5 * time.Second))
		errs <- sc.Handshake()
	}()
	// A certificate that names no loopback address, from this CA.
	c, k := issueNoLoopback(t, ca, "h2", "10.212.0.2")
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	cc := h1.Client.Clone()
	cc.Certificates = []tls.Certificate{pair}
	cc.ServerName = "127.0.0.1"
	conn, err := tls.Dial("tcp", ln.Addr().String(), cc)
	if err == nil {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if serr := <-errs; !errors.Is(serr, ErrCertHost) {
		t.Fatalf("server: %v, want ErrCertHost (client: %v)", serr, err)
	}
}

func issueNoLoopback(t *testing.T, ca *CA, name, ip string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, IPAddresses: []net.IP{net.ParseIP(ip)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}
