package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// `rdmamgr demo`, run as users run it, moves and verifies its bytes and
// exits 0 once both nodes are closed. It used to print its results and then
// hang about 10 s: b's manager PID, handed to a's actor system, cached a's
// route to b, so b's Close sent its PoisonPill over gRPC to its own guard,
// which drops it, and waited out protoactor's 10 s. Close now reports such
// a timeout, and the demo fails on it; the context only guards against a
// hang.
func TestDemoExitsCleanly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, code := runBin(t, ctx, "demo")
	if ctx.Err() != nil {
		t.Fatalf("demo still running after the hang guard:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	if code != 0 || !strings.Contains(stdout, "every byte matched") {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, bad := range []string{"timeout", "close manager"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("demo's stderr says %q:\n%s", bad, stderr)
		}
	}
}
