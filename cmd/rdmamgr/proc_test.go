package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// Process-level checks of the defects issue 13 lists: each runs the
// rdmamgr binary as a user would.

// margin is how much longer than asked a bounded command may take
// (process start, actor system start and stop).
const margin = 3 * time.Second

// "status --timeout 1s --peer 127.0.0.1:1 took 10 s, and said context
// deadline exceeded where the cause was connection refused"
func TestStatusRefusedPortSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testBinary(t) // built before the clock starts
	t0 := time.Now()
	_, stderr, code := runBin(t, ctx, "status", "--timeout", "1s", "--peer", "127.0.0.1:1")
	if el := time.Since(t0); el > time.Second+margin {
		t.Errorf("took %v with --timeout 1s", el)
	}
	if code != 1 || !strings.Contains(stderr, "connection refused") || strings.Contains(stderr, "deadline") {
		t.Errorf("exit %d, stderr %q: want 1 and connection refused", code, stderr)
	}
}

// A peer that accepts connections but never answers: --timeout still ends
// the command in time, and says so.
func TestStatusTimeoutHonoured(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testBinary(t) // built before the clock starts
	t0 := time.Now()
	_, stderr, code := runBin(t, ctx, "status", "--timeout", "1s", "--peer", ln.Addr().String())
	if el := time.Since(t0); el > time.Second+margin {
		t.Errorf("took %v with --timeout 1s", el)
	}
	if code != 1 || !strings.Contains(stderr, "no answer within --timeout 1s") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// "ctrl-C loses every figure and exits 1"
func TestBenchInterruptPrintsPartialAndExits130(t *testing.T) {
	d := startDaemon(t)
	var stdout, stderr proc.Buffer
	// TCP: the daemon serves (and counts) every operation; an shm peer
	// copies without the owner.
	b := spawnBin(t, &stdout, &stderr, "bench", "--peer", d.addr, "--size", "64KiB", "--count", "100000000", "--concurrency", "2", "--backend", "tcp")
	waitFor(t, "the daemon to serve operations", func() bool { return servedOps(t, d) > 100 })
	_ = b.Signal(syscall.SIGINT)
	if err := b.Wait(); b.ExitCode() != 130 {
		t.Fatalf("bench ended with %v, want exit 130\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"stopped early (interrupted (interrupt))", "throughput:", "latency: p50=", "p99.9=", "errors: 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\r") {
		t.Errorf("progress line written to a pipe:\n%q", out)
	}
	if !strings.Contains(stderr.String(), "rdmamgr bench: interrupted") {
		t.Errorf("stderr: %q", stderr.String())
	}
}

// "bench against a peer killed mid-run printed 5965.0 MiB/s … errors:
// 165717: failed operations were counted as bytes moved; it then took 10 s
// to exit"
func TestBenchPeerKilledCountsOnlySuccesses(t *testing.T) {
	d := startDaemon(t)
	var stdout, stderr proc.Buffer
	b := spawnBin(t, &stdout, &stderr, "bench", "--peer", d.addr, "--size", "64KiB", "--count", "100000000",
		"--concurrency", "4", "--max-errors", "1000000", "--json", "-", "--backend", "tcp") // TCP: served ops are counted
	waitFor(t, "the daemon to serve operations", func() bool { return servedOps(t, d) > 100 })
	d.kill()
	killed := time.Now()
	err := b.Wait()
	if el := time.Since(killed); el > 2*margin {
		t.Errorf("bench took %v to exit after its peer died", el)
	}
	if b.ExitCode() != 1 {
		t.Fatalf("bench ended with %v, want exit 1\nstderr:\n%s", err, stderr.String())
	}
	var doc benchDoc
	if err := json.Unmarshal([]byte(stdout.String()), &doc); err != nil {
		t.Fatalf("--json -: %v\n%s", err, stdout.String())
	}
	if doc.Complete || doc.Stopped != "the peer is gone" || doc.Errors < 1 {
		t.Errorf("complete=%v stopped=%q errors=%d: want an incomplete run stopped by the peer's death", doc.Complete, doc.Stopped, doc.Errors)
	}
	if doc.Bytes != doc.Ops*doc.SizeBytes || doc.Ops == 0 || doc.Ops >= uint64(doc.Count) {
		t.Errorf("ops %d bytes %d of %d-byte ops: bytes must be those of successful operations only", doc.Ops, doc.Bytes, doc.SizeBytes)
	}
	if !strings.Contains(stderr.String(), "stopped after") || !strings.Contains(stderr.String(), "peer gone") {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// "A bench without --secret-file fails with … handshake MAC does not
// verify: backend: unauthenticated: backend: unauthenticated: … and no
// hint to pass the secret"
func TestBenchWithoutSecretHints(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--secret-file", secret)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, stderr, code := runBin(t, ctx, "bench", "--peer", d.addr, "--count", "10")
	if code != 1 || strings.Count(stderr, "unauthenticated") != 1 || !strings.Contains(stderr, "(do both sides use the same --secret-file?)") {
		t.Errorf("exit %d, stderr %q: want exit 1, unauthenticated said once and the --secret-file hint", code, stderr)
	}
	if strings.Contains(stderr, `Address:"`) || strings.Contains(stderr, "*rdmapb.") {
		t.Errorf("stderr shows protobuf text or Go types: %q", stderr)
	}
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// bench --timeout ends a long run in time with the figures so far.
func TestBenchTimeoutHonoured(t *testing.T) {
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testBinary(t)
	t0 := time.Now()
	stdout, stderr, code := runBin(t, ctx, "bench", "--peer", d.addr, "--size", "64KiB", "--count", "100000000", "--timeout", "2s")
	if el := time.Since(t0); el > 2*time.Second+margin {
		t.Errorf("took %v with --timeout 2s", el)
	}
	if code != 1 || !strings.Contains(stderr, "--timeout ended the run after") || !strings.Contains(stdout, "throughput:") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
