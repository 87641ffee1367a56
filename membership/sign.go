package membership

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rdmamgr/rdmamgr"
)

// ErrForged: a membership record that does not verify: no signature, a
// certificate not from the deployment CA, a certificate that names another
// member or not the record's address, or a bad signature. Followers
// ignore such records; Lookup returns this error.
var ErrForged = fmt.Errorf("membership record does not verify: %w", rdmamgr.ErrUnauthenticated)

// ErrNotOurName: Register was asked for a name other than the one our
// certificate carries.
var ErrNotOurName = fmt.Errorf("a member registers only under its certificate's name: %w", rdmamgr.ErrUnauthenticated)

// signedPayload is what a record's signature covers: the cluster and every
// field but the certificate and the signature, in an unambiguous encoding.
func signedPayload(cluster string, m Member) []byte {
	b, _ := json.Marshal([]string{"rdmamgr member v1", cluster, m.Name, m.Address, m.Manager, m.Data, m.ID})
	return b
}

// sign fills m.Cert and m.Sig with our identity, when the registry has one.
func (r *Registry) sign(m *Member) error {
	id := r.cfg.Identity
	if id == nil {
		return nil
	}
	if len(id.Certificate) == 0 {
		return errors.New("membership: identity without a certificate")
	}
	leaf, err := x509.ParseCertificate(id.Certificate[0])
	if err != nil {
		return fmt.Errorf("membership: identity: %w", err)
	}
	if leaf.Subject.CommonName != m.Name {
		return fmt.Errorf("membership: register %q with the certificate of %q: %w", m.Name, leaf.Subject.CommonName, ErrNotOurName)
	}
	signer, ok := id.PrivateKey.(crypto.Signer)
	if !ok {
		return errors.New("membership: identity key cannot sign")
	}
	msg := signedPayload(r.cfg.Cluster, *m)
	var sig []byte
	switch signer.Public().(type) {
	case ed25519.PublicKey:
		sig, err = signer.Sign(rand.Reader, msg, crypto.Hash(0))
	case *ecdsa.PublicKey, *rsa.PublicKey:
		d := sha256.Sum256(msg)
		sig, err = signer.Sign(rand.Reader, d[:], crypto.SHA256)
	default:
		return fmt.Errorf("membership: identity key %T", signer.Public())
	}
	if err != nil {
		return fmt.Errorf("membership: sign our record: %w", err)
	}
	m.Cert = base64.StdEncoding.EncodeToString(id.Certificate[0])
	m.Sig = base64.StdEncoding.EncodeToString(sig)
	return nil
}

// verify checks m, found under the key of member name, when the registry
// has roots: signed by a certificate from the CA that carries name and
// names the record's address host.
func (r *Registry) verify(name string, m Member) error {
	if m.Name != name {
		return fmt.Errorf("record under %q names %q: %w", name, m.Name, ErrForged)
	}
	if r.cfg.Roots == nil {
		return nil
	}
	der, err1 := base64.StdEncoding.DecodeString(m.Cert)
	sig, err2 := base64.StdEncoding.DecodeString(m.Sig)
	if m.Cert == "" || m.Sig == "" || err1 != nil || err2 != nil {
		return fmt.Errorf("record %q is not signed: %w", name, ErrForged)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("record %q: certificate: %v: %w", name, err, ErrForged)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: r.cfg.Roots, CurrentTime: time.Now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("record %q: %v: %w", name, err, ErrForged)
	}
	if cert.Subject.CommonName != name {
		return fmt.Errorf("record %q signed by member %q: %w", name, cert.Subject.CommonName, ErrForged)
	}
	host, _, err := net.SplitHostPort(m.Address)
	if err != nil || cert.VerifyHostname(host) != nil {
		return fmt.Errorf("record %q: address %q is not in its certificate: %w", name, m.Address, ErrForged)
	}
	var alg x509.SignatureAlgorithm
	switch cert.PublicKey.(type) {
	case ed25519.PublicKey:
		alg = x509.PureEd25519
	case *ecdsa.PublicKey:
		alg = x509.ECDSAWithSHA256
	case *rsa.PublicKey:
		alg = x509.SHA256WithRSA
	default:
		return fmt.Errorf("record %q: key %T: %w", name, cert.PublicKey, ErrForged)
	}
	if err := cert.CheckSignature(alg, signedPayload(r.cfg.Cluster, m), sig); err != nil {
		return fmt.Errorf("record %q: signature: %v: %w", name, err, ErrForged)
	}
	return nil
}
