//go:build linux

package test

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// Issue 24 row 6: a client with no secret and no certificate asked a
// loopback --secret-file daemon for buffers and got 5 × 1 GiB (only data
// connections proved the secret). Now every control connection proves it:
// a process without the secret gets no buffer, no queue pair, no status,
// and the CLI says why at once. A daemon with neither secret nor TLS says
// at start that any local process may use it.
func TestAttackControlWithoutSecret(t *testing.T) {
	good := secretFile(t, "a deployment secret of some length")
	d, err := spawnDaemon(t.Name(), "127.0.0.1:0", "--secret-file", good)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(t) })

	// The attacker: this test process's node, which holds no secret.
	if b, err := d.client().RequestBuffer(testCtx(t, 5*time.Second), 1<<20, buffer.AccessReadWrite); err == nil {
		t.Fatalf("a process without the secret got a buffer: %v", b)
	}
	if st, err := d.client().Status(testCtx(t, 5*time.Second)); err == nil {
		t.Fatalf("a process without the secret got status: %v", st)
	}
	out, err := runCLI(t, "status", "--peer", d.addr)
	if err == nil || !strings.Contains(out, "sealed by a shared secret") || !strings.Contains(out, "--secret-file") {
		t.Fatalf("status without the secret: %v\n%s", err, out)
	}
	out, err = runCLI(t, "bench", "--peer", d.addr, "--op", "put", "--size", "64KiB", "--count", "4", "--backend", "tcp",
		"--secret-file", secretFile(t, "somebody else's secret, also long"))
	if err == nil || !strings.Contains(out, "unauthenticated") {
		t.Fatalf("bench with a wrong secret: %v\n%s", err, out)
	}

	// Legitimate: bench and status with the secret; the refusals counted.
	out, err = runCLI(t, "bench", "--peer", d.addr, "--op", "put", "--size", "1MiB", "--count", "32", "--verify",
		"--backend", "tcp", "--secret-file", good)
	if err != nil || !strings.Contains(out, "verify: ok") {
		t.Fatalf("bench with the secret: %v\n%s", err, out)
	}
	out, err = runCLI(t, "status", "--peer", d.addr, "--secret-file", good, "--json")
	if err != nil || !strings.Contains(out, `"secret":`) {
		t.Fatalf("status with the secret: want refusals under \"secret\": %v\n%s", err, out)
	}

	// Open daemons say so.
	open, err := spawnDaemon(t.Name()+"-open", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open.stop(t)
	if !strings.Contains(open.stderr.String(), "any local process may use this daemon") {
		t.Fatalf("a daemon without secret or TLS did not warn:\n%s", open.stderr)
	}
}
