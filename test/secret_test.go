//go:build linux

package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveWith starts `rdmamgr serve` with extra flags and returns its address;
// the daemon is stopped (SIGTERM, exit 0) at cleanup.
func serveWith(t *testing.T, extra ...string) string {
	t.Helper()
	d, err := spawnDaemon(t.Name(), "127.0.0.1:0", extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(t) })
	return d.addr
}

// runCLI runs the CLI and returns its output (stdout, then stderr) and
// error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, errOut, err := runRdmamgr(60*time.Second, args...)
	return out + errOut, err
}

func secretFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Managers sharing a secret work together; a peer without it, or with
// another one, is refused before any memory is touched.
func TestSharedSecret(t *testing.T) {
	good := secretFile(t, "a deployment secret of some length")
	bad := secretFile(t, "somebody else's secret, also long")
	addr := serveWith(t, "--secret-file", good)
	bench := []string{"bench", "--peer", addr, "--op", "put", "--size", "64KiB", "--count", "16", "--verify", "--backend", "tcp"}

	out, err := runCLI(t, append(bench, "--secret-file", good)...)
	if err != nil || !strings.Contains(out, "verify: ok") {
		t.Fatalf("bench with the secret: %v\n%s", err, out)
	}
	for name, extra := range map[string][]string{"no secret": nil, "wrong secret": {"--secret-file", bad}} {
		out, err := runCLI(t, append(bench, extra...)...)
		if err == nil {
			t.Fatalf("bench with %s succeeded:\n%s", name, out)
		}
		if !strings.Contains(out, "unauthenticated") {
			t.Fatalf("bench with %s: want an authentication error, got:\n%s", name, out)
		}
	}
	out, err = runCLI(t, "status", "--peer", addr, "--secret-file", good)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if !strings.Contains(out, "served for peers") {
		t.Fatalf("status output:\n%s", out)
	}
}

// A manager caps what remote peers may hold.
func TestRemoteCap(t *testing.T) {
	addr := serveWith(t, "--max-remote", "1MiB")
	out, err := runCLI(t, "bench", "--peer", addr, "--op", "put", "--size", "512KiB", "--count", "4", "--backend", "tcp")
	if err != nil {
		t.Fatalf("bench within the cap: %v\n%s", err, out)
	}
	out, err = runCLI(t, "bench", "--peer", addr, "--op", "put", "--size", "2MiB", "--count", "4", "--backend", "tcp")
	if err == nil || !strings.Contains(out, "limit exceeded") {
		t.Fatalf("bench over the cap: %v\n%s", err, out)
	}
	// The cap is per moment, not per lifetime: released buffers free it.
	out, err = runCLI(t, "bench", "--peer", addr, "--op", "get", "--size", "1MiB", "--count", "4", "--backend", "tcp")
	if err != nil {
		t.Fatalf("bench after releases: %v\n%s", err, out)
	}
}
