package membership

import (
	"net"
	"testing"
	"time"
)

// Open fails, within about DialTimeout, when no etcd answers.
func TestOpenFailsWithoutEtcd(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := l.Addr().String()
	l.Close() // nothing listens there now
	start := time.Now()
	r, err := Open(Config{Endpoints: []string{ep}, Cluster: "t", DialTimeout: 300 * time.Millisecond})
	if err == nil {
		r.Close()
		t.Fatalf("Open of %s (nothing listening) succeeded", ep)
	}
	t.Logf("Open failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
}
