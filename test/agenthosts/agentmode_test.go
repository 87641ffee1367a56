//go:build linux

package agenthosts

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/node"
	"github.com/rdmamgr/rdmamgr/test/netns"
)

// agentBuilt says whether this tree has agent mode (node.Config.Agent and
// `rdmamgr serve --agent-socket`); the agent-mode tests skip without it.
const agentBuilt = true

// agentRoutes is --agent-routes: N, the data connections between two
// agents' hosts (half on each agent's route to the other).
const agentRoutes = 4

// withAgent points cfg at the host agent's socket (none: direct mode).
func withAgent(cfg *node.Config, sock string) error {
	cfg.Agent = sock
	return nil
}

// Ports of an agent inside its host (the namespace is the test's own).
const (
	agentPort  = 7000
	agentData  = 7001
	agentAdmin = 7002
	envFetch   = "RDMAMGR_AGFETCH" // the test binary run in a host as an HTTP getter
)

// agentProc is a host's agent: `rdmamgr serve --agent-socket`.
type agentProc struct {
	host *netns.Host
	args []string
	p    *proc.Proc
	addr string // its actor system
	data string // its TCP data listener
	log  *proc.Buffer
}

// agentSocket is h's agent socket (the hosts share the file system: one
// directory per host).
func (c *cluster) agentSocket(h *netns.Host) string {
	return filepath.Join(c.dir, h.Name, "agent.sock")
}

// startAgent starts h's agent (TLS on its control plane, which serve wants
// beyond loopback; the deployment's secret for attaching processes and
// data connections) and waits for its ready line. It is stopped when the
// test ends.
func (c *cluster) startAgent(h *netns.Host) *agentProc {
	c.t.Helper()
	bin, err := rdmamgrBin()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(c.dir, h.Name), 0o700); err != nil {
		c.t.Fatal(err)
	}
	a := &agentProc{host: h, data: hostPort(h.Addr, agentData), args: []string{"serve",
		"--listen", hostPort(h.Addr, agentPort), "--data-listen", hostPort(h.Addr, agentData),
		"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", agentAdmin),
		"--secret-file", c.secretFile(), "--agent-socket", c.agentSocket(h), "--agent-routes", strconv.Itoa(agentRoutes),
		"--tls-ca", filepath.Join(c.certs(), "ca.crt"),
		"--tls-cert", filepath.Join(c.certs(), h.Name+".crt"), "--tls-key", filepath.Join(c.certs(), h.Name+".key")}}
	if dir := os.Getenv("RDMAMGR_AGPROFILE"); dir != "" { // the agents' CPU profiles, for a figures run
		a.args = append(a.args, "--cpuprofile", filepath.Join(dir, fmt.Sprintf("agent-%s-%d.pprof", h.Name, time.Now().UnixNano())))
	}
	if err := a.start(bin); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if err := a.p.Stop(20 * time.Second); err != nil && !a.p.Killed() {
			c.t.Errorf("%s agent: %v\n%s", h.Name, err, a.log)
		} else if c.t.Failed() {
			c.t.Logf("%s agent's log:\n%s", h.Name, tail(a.log.String(), 40))
		}
	})
	return a
}

func hostPort(host string, port int) string { return fmt.Sprintf("%s:%d", host, port) }

func (a *agentProc) start(bin string) error {
	a.log = &proc.Buffer{}
	path, argv := a.host.Wrap(bin, a.args...)
	p, err := proc.Start(context.Background(), proc.Spec{Name: a.host.Name + " agent", Path: path, Args: argv, Stderr: a.log})
	if err != nil {
		return fmt.Errorf("%s agent: %w\n%s", a.host.Name, err, a.log)
	}
	a.p, a.addr = p, p.Addr
	return nil
}

// restart starts a killed agent again with the same arguments (its
// address may stay taken for a moment: retried for 5 s).
func (a *agentProc) restart(t *testing.T) {
	t.Helper()
	bin, _ := rdmamgrBin()
	var err error
	for i := 0; i < 20; i++ {
		if err = a.start(bin); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatal(err)
}

// secretFile writes the deployment's secret once and returns its path.
func (c *cluster) secretFile() string {
	p := filepath.Join(c.dir, "secret")
	if _, err := os.Stat(p); err != nil {
		if err := os.WriteFile(p, []byte(c.secret+"\n"), 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	return p
}

// certs issues the deployment's CA and one certificate per host once and
// returns their directory.
func (c *cluster) certs() string {
	dir := filepath.Join(c.dir, "certs")
	if _, err := os.Stat(filepath.Join(dir, "ca.crt")); err == nil {
		return dir
	}
	bin, err := rdmamgrBin()
	if err != nil {
		c.t.Fatal(err)
	}
	args := []string{"certs", "--dir", dir}
	for _, h := range c.net.Hosts {
		args = append(args, "--host", h.Name+"="+h.Addr)
	}
	var out proc.Buffer
	if err := proc.Run(context.Background(), proc.Spec{Path: bin, Args: args, Stdout: &out, Stderr: &out}); err != nil {
		c.t.Fatalf("rdmamgr certs: %v\n%s", err, out.String())
	}
	return dir
}

// stats reads the agent's RSS (from /proc), and its Go heap and goroutines
// from its /metrics (fetched inside its host by this test binary).
func (a *agentProc) stats(t *testing.T) *workerStats {
	t.Helper()
	s := &workerStats{RSSKiB: rssKiB(a.p.Pid())}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out proc.Buffer
	path, argv := a.host.Wrap(os.Args[0], "-test.run=^$")
	err := proc.Run(ctx, proc.Spec{Path: path, Args: argv, Env: []string{envFetch + fmt.Sprintf("=http://127.0.0.1:%d/metrics", agentAdmin)},
		Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("%s agent's metrics: %v\n%s", a.host.Name, err, out.String())
	}
	var heap, stack float64
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "go_goroutines":
			s.Goroutines = int(v)
		case "go_memstats_heap_inuse_bytes":
			heap = v
		case "go_memstats_stack_inuse_bytes":
			stack = v
		}
	}
	s.HeapKiB = int64(heap+stack) >> 10
	return s
}

// fetchMain is the test binary as an HTTP getter inside a host: it prints
// the body of the URL in RDMAMGR_AGFETCH.
func fetchMain(url string) int {
	c := &http.Client{Timeout: 20 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer res.Body.Close()
	if _, err := io.Copy(os.Stdout, res.Body); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
