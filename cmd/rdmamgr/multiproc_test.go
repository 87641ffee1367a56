package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
)

var procsRowRE = regexp.MustCompile(`(?m)^(\S+)\s+(put|get)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+\.\d)\s+(\d+)\s+(\d+\.\d)\s+(\d+\.\d\d)$`)

// bench --baseline --procs 2, as a process: two bench processes against
// its manager, every byte checked, a row per size × op with both sides'
// totals, and the JSON of the same; no child is left behind.
func TestBenchBaselineProcs(t *testing.T) {
	bin := testBinary(t)
	jsonPath := filepath.Join(t.TempDir(), "procs.json")
	args := []string{"bench", "--baseline", "--procs", "2", "--sizes", "8B,64KiB", "--inflight", "16", "--concurrency", "2",
		"--count", "40", "--warmup", "2", "--verify", "--json", jsonPath}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr proc.Buffer
	if err := proc.Run(ctx, proc.Spec{Path: bin, Args: args, Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("rdmamgr %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	rows := procsRowRE.FindAllStringSubmatch(out, -1)
	if len(rows) != 4 {
		t.Fatalf("want 4 rows, got %q in:\n%s", rows, out)
	}
	for i, want := range [][4]string{{"8B", "put", "2", "16"}, {"8B", "get", "2", "16"}, {"64KiB", "put", "2", "2"}, {"64KiB", "get", "2", "2"}} {
		if got := [4]string{rows[i][1], rows[i][2], rows[i][3], rows[i][4]}; got != want {
			t.Errorf("row %d: %v, want size, op, procs, in flight %v", i, got, want)
		}
	}
	if !strings.Contains(out, "2 bench processes against manager 127.0.0.1:") ||
		!regexp.MustCompile(`\nverify: ok \(\S+ \S+ checked, 0 mismatches\)\nerrors: 0\n$`).MatchString(out) ||
		!strings.Contains(out, "\nroute backend: tcp\n") {
		t.Errorf("header, verify or errors line:\n%s", out)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc procsDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Procs != 2 || doc.Backend != "tcp" || len(doc.Rows) != 4 {
		t.Fatalf("--json:\n%s", b)
	}
	for _, r := range doc.Rows {
		// Every operation of both processes checked, none wrong.
		if r.Verified != 2*40*r.SizeBytes || r.Mismatches != 0 || r.Errors != 0 ||
			r.OursOps <= 0 || r.TCPOps <= 0 || r.Ratio <= 0 || r.Count != 40 {
			t.Errorf("--json row %+v", r)
		}
	}
}

// The plain bench's --inflight is --ring with that many in flight, every
// byte checked; it excludes --concurrency, and --procs is --baseline's.
func TestBenchInflightFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--peer", "127.0.0.1:1", "--inflight", "8", "--concurrency", "4"},
		{"bench", "--peer", "127.0.0.1:1", "--inflight", "-1"},
		{"bench", "--peer", "127.0.0.1:1", "--procs", "2"},
		{"bench", "--baseline", "--procs", "2", "--against", "memcpy"},
		{"bench", "--baseline", "--procs", "65"},
		{"bench", "--peer", "127.0.0.1:1", "--shared-slot"},                                // no ring
		{"bench", "--peer", "127.0.0.1:1", "--inflight", "8", "--shared-slot", "--verify"}, // the same bytes: nothing to check
		{"bench", "--baseline", "--shared-slot", "--verify"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage); %s", args, code, stderr.String())
		}
	}
	a := &benchArgs{peer: "127.0.0.1:1", op: "get", size: "8B", count: 10, concurrency: 1, inflight: 32, timeout: time.Minute}
	cfg, err := a.config()
	if err != nil || !cfg.Ring || cfg.Concurrency != 32 {
		t.Errorf("--inflight 32: %+v, %v", cfg, err)
	}
	a.sharedSlot, a.concurrency = true, 1 // config set --concurrency from --inflight
	if cfg, err := a.config(); err != nil || !cfg.SharedSlot {
		t.Errorf("--inflight 32 --shared-slot: %+v, %v", cfg, err)
	}
}

// bench --inflight 32 against a daemon, as a process: 8-byte gets and puts
// with 32 in flight from one goroutine, every byte checked, ops/s beside
// MiB/s.
func TestBenchInflightRuns(t *testing.T) {
	d := startDaemon(t)
	for _, op := range []string{"put", "get"} {
		args := []string{"bench", "--peer", d.addr, "--op", op, "--size", "8B", "--count", "500", "--inflight", "32", "--verify", "--json", "-"}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var stdout, stderr proc.Buffer
		err := proc.Run(ctx, proc.Spec{Path: testBinary(t), Args: args, Stdout: &stdout, Stderr: &stderr})
		cancel()
		if err != nil {
			t.Fatalf("rdmamgr %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		var doc benchDoc
		if err := json.Unmarshal([]byte(stdout.String()), &doc); err != nil {
			t.Fatalf("%v:\n%s", err, stdout.String())
		}
		if doc.Concurrency != 32 || doc.Ops != 500 || doc.Verified != 500*8 || doc.Mismatches != 0 || doc.Errors != 0 ||
			doc.OpsPerSec <= 0 || doc.MiBPerSec <= 0 || !doc.Complete {
			t.Errorf("%s: %+v", op, doc)
		}
	}
}
