package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/test/netns"
)

const repoRoot = "../.."

// fenced returns the bodies of the README's code blocks of lang.
func fenced(t *testing.T, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	rest := string(b)
	for {
		_, after, ok := strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			return blocks
		}
		body, tail, _ := strings.Cut(after, "```\n")
		blocks = append(blocks, body)
		rest = tail
	}
}

// The README's Go block is examples/readme/main.go from func run on, so
// it compiles (go build ./... and go vet) and runs (TestReadmeGoExampleRuns).
func TestReadmeGoBlockIsTheExample(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "examples/readme/main.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "\nfunc run(")
	if !ok {
		t.Fatal("examples/readme/main.go has no func run")
	}
	want := "func run(" + body
	blocks := fenced(t, "go")
	if len(blocks) != 1 || blocks[0] != want {
		t.Errorf("README's go block differs from examples/readme/main.go (from func run on); paste the file's text into README.md")
	}
}

// The example runs against a daemon that requires the shared secret.
func TestReadmeGoExampleRuns(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("an example secret of enough bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--secret-file", secret)
	exe := filepath.Join(t.TempDir(), "readme")
	if out, err := exec.Command("go", "build", "-o", exe, "../../examples/readme").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/readme: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "-peer", d.addr, "-secret-file", secret).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `read back "hello, remote memory"`) {
		t.Fatalf("examples/readme: %v\n%s", err, out)
	}
}

// Every command of the README's CLI block runs as written, in order, in a
// directory that looks like a checkout. The README's ports are fixed
// (8090 and 8091), so the block runs in a network namespace of its own
// (test/netns), whose loopback no other process on the machine uses;
// without root it runs on the machine's loopback if both ports are free,
// and skips otherwise. set -x stamps each command with the seconds since
// the start, so a failure shows which one was slow.
func TestReadmeCLIBlockRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a baseline bench")
	}
	var block string
	for _, b := range fenced(t, "sh") {
		if strings.Contains(b, "./rdmamgr serve") {
			block = b // the first: the CLI block (the two-host walk-through needs two hosts)
			break
		}
	}
	if block == "" {
		t.Fatal("README has no sh block with ./rdmamgr serve")
	}
	dir := t.TempDir()
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(repoRoot)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	script := "set -euo pipefail\ntrap 'kill %1 2>/dev/null || true' EXIT\nPS4='+ ${SECONDS}s '\nset -x\n" + block + "wait\n"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if nsErr := netns.Available(); nsErr == nil {
		cmd = netns.New(t, 1).Hosts[0].Command(ctx, "bash", "-c", script)
	} else {
		for _, port := range []string{"8090", "8091"} {
			l, err := net.Listen("tcp", "127.0.0.1:"+port)
			if err != nil {
				t.Skipf("no network namespace here (%v), and port %s is taken: %v", nsErr, port, err)
			}
			l.Close()
		}
		cmd = exec.CommandContext(ctx, "bash", "-c", script)
	}
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RDMAMGR_METRICS_LISTEN=") { // the README's default port, 8091
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("README CLI block: %v\n%s", err, out.String())
	}
	var steps []string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "+ ") {
			steps = append(steps, line)
		}
	}
	t.Logf("the block's commands, each with the seconds since the start:\n%s", strings.Join(steps, "\n"))
	for _, want := range []string{"ready 127.0.0.1:8090", "verify: ok", "routes out: 0", "rdmamgr_served_ops_total", "no devices (built without ibverbs)", "ratio", "rdmamgr (devel)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
