package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// Two processes on this host under the default selection move bytes over
// shm: the daemon counts what the bench's copies did (the initiator keeps
// the counters in the route's state table), and when the daemon is
// killed mid-copy the bench survives, reports the peer gone and counts
// only what succeeded.
func TestSHMBenchPeerKilled(t *testing.T) {
	d := startDaemon(t)
	var stdout, stderr proc.Buffer
	b := spawnBin(t, &stdout, &stderr, "bench", "--peer", d.addr, "--size", "256KiB", "--count", "100000000",
		"--concurrency", "4", "--max-errors", "1000000", "--json", "-", "--verify")
	waitFor(t, "the daemon to count shm operations", func() bool { return servedOps(t, d) > 100 })
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
	if doc.Backend != "shm" || doc.Complete || doc.Stopped != "the peer is gone" || doc.Errors < 1 || doc.Mismatches != 0 || doc.Verified == 0 {
		t.Errorf("backend %s complete=%v stopped=%q errors=%d mismatches=%d verified=%d: want an incomplete shm run stopped by the peer's death, verified bytes, no wrong ones",
			doc.Backend, doc.Complete, doc.Stopped, doc.Errors, doc.Mismatches, doc.Verified)
	}
	if doc.Bytes != doc.Ops*doc.SizeBytes || doc.Ops == 0 {
		t.Errorf("ops %d bytes %d of %d-byte ops: bytes must be those of successful operations only", doc.Ops, doc.Bytes, doc.SizeBytes)
	}
	if !strings.Contains(stderr.String(), "peer gone") {
		t.Errorf("stderr: %s", stderr.String())
	}
}
