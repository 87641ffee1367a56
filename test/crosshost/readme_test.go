//go:build linux

package crosshost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/test/netns"
)

// readmeHost is where a README line runs: a namespaced host (or, for the
// lines before any host's comment, the place the CA is kept) with its own
// HOME and working directory, ./rdmamgr in it, and the variables its
// earlier lines set.
type readmeHost struct {
	name string // "A", "B", "10.0.0.3", "CA"
	h    *netns.Host
	home string
	dir  string
	vars []string // assignment lines run so far, replayed before each line
}

var (
	// "# host A" (a line of its own) or "# on A …" (after a command).
	hostComment = regexp.MustCompile(`#\s*(?:host|on)\s+([A-Za-z0-9.]+)`)
	assignment  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	certsHost   = regexp.MustCompile(`--host\s+([a-z0-9-]+)=([0-9.]+)`)
	logsQuote   = regexp.MustCompile(`logs "([^"]+)"`)
	printsReady = regexp.MustCompile(`prints "ready ([^"]+)"`)
	readyWord   = regexp.MustCompile(`\bready\b`)
	nextHeading = regexp.MustCompile(`\n#{2,6} `) // a shell comment has one #
)

// readmeBlocks returns the ```sh blocks of README.md's "### Two hosts"
// section, continuation lines joined.
func readmeBlocks(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n### Two hosts\n")
	if !ok {
		t.Fatal(`README.md has no "### Two hosts" section`)
	}
	if loc := nextHeading.FindStringIndex(sec); loc != nil {
		sec = sec[:loc[0]]
	}
	var blocks [][]string
	for {
		_, rest, ok := strings.Cut(sec, "```sh\n")
		if !ok {
			break
		}
		body, after, ok := strings.Cut(rest, "```")
		if !ok {
			t.Fatal("README.md: unterminated ```sh block")
		}
		sec = after
		body = strings.ReplaceAll(body, "\\\n", " ")
		blocks = append(blocks, strings.Split(strings.TrimRight(body, "\n"), "\n"))
	}
	if len(blocks) != 2 {
		t.Fatalf("README.md's Two hosts section has %d sh blocks, want 2", len(blocks))
	}
	return blocks
}

// The two-host and etcd walk-through of README.md runs as written on
// namespaced hosts at the README's own addresses: host A 10.0.0.1, host B
// 10.0.0.2, etcd on 10.0.0.3. Each line runs with bash on the host its
// comment names (lines after "# host B" on B; lines before any host's, such
// as certs, where the CA is kept, whose ~/rdmamgr-tls then gives each host
// ca.crt and its own pair); serve and etcd run in the background until
// their block ends. Every command must exit 0 and every --verify bench say
// "verify: ok".
func TestReadmeTwoHosts(t *testing.T) {
	blocks := readmeBlocks(t)
	nt := netns.New(t, 3)
	byName := map[string]*readmeHost{}
	byAddr := map[string]*readmeHost{}
	for i, n := range []string{"A", "B", "10.0.0.3"} {
		h := nt.Hosts[i]
		addr := fmt.Sprintf("10.0.0.%d", i+1)
		// Readdress eth0: the subnet exists only inside these namespaces.
		for _, args := range [][]string{{"-n", h.NS, "addr", "flush", "dev", "eth0"},
			{"-n", h.NS, "addr", "add", addr + "/24", "dev", "eth0"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v\n%s", args, err, out)
			}
		}
		h.Addr = addr
		rh := newReadmeHost(t, n, h)
		byName[n], byAddr[addr] = rh, rh
	}
	byName["a"], byName["b"] = byName["A"], byName["B"]
	ca := newReadmeHost(t, "CA", nt.Hosts[0]) // certs touch no network
	if _, err := exec.LookPath("etcd"); err != nil {
		msg := "the README's etcd walk-through needs etcd (apt-get install etcd-server)"
		if os.Getenv("RDMAMGR_REQUIRE_NETNS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	for bi, block := range blocks {
		var bg []*proc.Proc
		var last *proc.Proc // the last background process, for "#   …" lines
		var lastLog *proc.Buffer
		cur := ca
		for _, line := range block {
			trim := strings.TrimSpace(line)
			if trim == "" {
				continue
			}
			if strings.HasPrefix(trim, "#") {
				if m := hostComment.FindStringSubmatch(trim); m != nil && strings.HasPrefix(trim, "# host") {
					cur = readmeLookup(t, byName, byAddr, m[1])
					continue
				}
				// A comment on what the last background process does.
				if last != nil {
					if m := printsReady.FindStringSubmatch(trim); m != nil && last.Addr != m[1] {
						t.Errorf("README: %q: it printed ready %s", trim, last.Addr)
					}
					// stdout's "ready" and stderr's log are read by two
					// goroutines: under load the log may lag the ready.
					if m := logsQuote.FindStringSubmatch(trim); m != nil && !eventually(func() bool { return strings.Contains(lastLog.String(), m[1]) }) {
						t.Errorf("README: %q: not in its log:\n%s", trim, lastLog)
					}
				}
				continue
			}
			on := cur
			if m := hostComment.FindStringSubmatch(trim); m != nil {
				on = readmeLookup(t, byName, byAddr, m[1])
			}
			if assignment.MatchString(trim) {
				on.vars = append(on.vars, trim)
				continue
			}
			t.Logf("block %d, on %s: %s", bi+1, on.name, trim)
			if strings.HasPrefix(trim, "etcd ") || strings.HasPrefix(trim, "./rdmamgr serve ") {
				last, lastLog = on.background(t, trim)
				bg = append(bg, last)
				continue
			}
			out, err := on.run(trim)
			if err != nil {
				t.Fatalf("README line on %s: %s\n%v\n%s", on.name, trim, err, out)
			}
			t.Logf("%s", out)
			if strings.Contains(trim, " bench ") && strings.Contains(trim, "--verify") && !strings.Contains(out, "verify: ok") {
				t.Fatalf("README line on %s: %s: no verify: ok\n%s", on.name, trim, out)
			}
			if strings.Contains(trim, " members ") && !strings.Contains(out, "10.0.0.1:8090") {
				t.Fatalf("README line on %s: %s: A is not listed\n%s", on.name, trim, out)
			}
			if strings.HasPrefix(trim, "./rdmamgr certs ") {
				ca.distribute(t, trim, byName, byAddr)
			}
		}
		// A block's daemons end with it: the next one starts its own.
		for i := len(bg) - 1; i >= 0; i-- {
			if err := bg[i].Stop(20 * time.Second); err != nil && !strings.HasPrefix(bg[i].Name, "etcd") {
				t.Errorf("%s: %v", bg[i].Name, err)
			}
		}
	}
}

func newReadmeHost(t *testing.T, name string, h *netns.Host) *readmeHost {
	t.Helper()
	rh := &readmeHost{name: name, h: h, home: t.TempDir(), dir: t.TempDir()}
	b, err := os.ReadFile(rdmamgrBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rh.dir, "rdmamgr"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return rh
}

func readmeLookup(t *testing.T, byName, byAddr map[string]*readmeHost, s string) *readmeHost {
	t.Helper()
	if h := byName[s]; h != nil {
		return h
	}
	if h := byAddr[s]; h != nil {
		return h
	}
	t.Fatalf("README names host %q, which is none of A, B or 10.0.0.3", s)
	return nil
}

// spec runs line with bash in rh: its HOME, its directory, its variables;
// exec so that a signal reaches the command itself.
func (rh *readmeHost) spec(line string, out *proc.Buffer) proc.Spec {
	script := strings.Join(append(append([]string{"unset RDMAMGR_METRICS_LISTEN"}, rh.vars...), "exec "+line), "\n")
	path, argv := rh.h.Wrap("bash", "-c", script)
	name := rh.name + ": " + strings.Fields(line)[0]
	if f := strings.Fields(line); len(f) > 1 && f[0] == "./rdmamgr" {
		name = rh.name + ": rdmamgr " + f[1]
	}
	if strings.HasPrefix(line, "etcd ") {
		name = "etcd on " + rh.name
	}
	return proc.Spec{Name: name, Path: path, Args: argv, Env: []string{"HOME=" + rh.home},
		Dir: rh.dir, Stdout: out, Stderr: out}
}

func (rh *readmeHost) run(line string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out proc.Buffer
	err := proc.Run(ctx, rh.spec(line, &out))
	return out.String(), err
}

// background starts line in rh and waits until it says it is ready
// (rdmamgr: "ready ADDR" on stdout; etcd: "ready to serve client
// requests"). It is killed when t ends if still running.
func (rh *readmeHost) background(t *testing.T, line string) (*proc.Proc, *proc.Buffer) {
	t.Helper()
	out := &proc.Buffer{}
	s := rh.spec(line, out)
	if strings.HasPrefix(line, "./rdmamgr ") {
		p, err := proc.Start(context.Background(), s)
		if err != nil {
			t.Fatalf("README line on %s: %s\n%v\n%s", rh.name, line, err, out)
		}
		t.Cleanup(func() { _ = p.Kill() })
		return p, out
	}
	p, err := proc.Spawn(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	deadline := time.Now().Add(60 * time.Second)
	for !readyWord.MatchString(out.String()) {
		select {
		case <-p.Done():
			t.Fatalf("README line on %s exited before it was ready: %s\n%v\n%s", rh.name, line, p.Wait(), out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("README line on %s not ready in 60 s: %s\n%s", rh.name, line, out)
		}
	}
	return p, out
}

// distribute copies ca.crt and each named host's own pair from the CA's
// ~/rdmamgr-tls to the same place in that host's HOME (ca.key stays).
func (rh *readmeHost) distribute(t *testing.T, line string, byName, byAddr map[string]*readmeHost) {
	t.Helper()
	src := filepath.Join(rh.home, "rdmamgr-tls")
	for _, m := range certsHost.FindAllStringSubmatch(line, -1) {
		to := byAddr[m[2]]
		if to == nil {
			t.Fatalf("README: certs for %s=%s, an address none of the hosts has", m[1], m[2])
		}
		dst := filepath.Join(to.home, "rdmamgr-tls")
		if err := os.MkdirAll(dst, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.crt", m[1] + ".crt", m[1] + ".key"} {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				t.Fatalf("README: certs made no %s: %v", f, err)
			}
			mode := os.FileMode(0o644)
			if strings.HasSuffix(f, ".key") {
				mode = 0o600
			}
			if err := os.WriteFile(filepath.Join(dst, f), b, mode); err != nil {
				t.Fatal(err)
			}
		}
	}
}
