//go:build linux

package crosshost

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/test/netns"
)

var rdmamgrBin string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rdmamgr-crosshost-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	rdmamgrBin = filepath.Join(dir, "rdmamgr")
	if out, err := exec.Command("go", "build", "-o", rdmamgrBin, "github.com/rdmamgr/rdmamgr/cmd/rdmamgr").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/rdmamgr: %v\n%s", err, out)
		return 1
	}
	netns.Sweep()
	// Daemons' admin listeners pick a port: several daemons share a host.
	os.Setenv("RDMAMGR_METRICS_LISTEN", "127.0.0.1:0")
	return m.Run()
}

// lockedBuf collects a child's stderr.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemon is `rdmamgr serve` running in a host.
type daemon struct {
	host *netns.Host
	cmd  *exec.Cmd
	addr string // what it printed after "ready"
	log  *lockedBuf
	done chan struct{}
	err  error
}

// serve starts `rdmamgr serve ARGS` in h and waits for "ready ADDR". The
// daemon is stopped (SIGTERM, then SIGKILL) when t ends.
func serve(t *testing.T, h *netns.Host, args ...string) *daemon {
	t.Helper()
	d, err := startServe(h, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	return d
}

func startServe(h *netns.Host, args ...string) (*daemon, error) {
	d := &daemon{host: h, log: &lockedBuf{}, done: make(chan struct{})}
	d.cmd = h.Command(context.Background(), rdmamgrBin, append([]string{"serve", "--backend", "tcp"}, args...)...)
	d.cmd.Stderr = d.log
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- a
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	select {
	case d.addr = <-ready:
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("%s: serve %v exited: %v\n%s", h.Name, args, d.err, d.log)
	case <-time.After(60 * time.Second):
		d.kill()
		return nil, fmt.Errorf("%s: serve %v: no ready line in 60 s\n%s", h.Name, args, d.log)
	}
}

// stop ends the daemon with SIGTERM (SIGKILL after 20 s) and waits.
func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		d.kill()
	}
}

// kill ends the daemon with SIGKILL and waits.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// run runs the rdmamgr CLI in h with a time bound and returns its combined
// output.
func run(t *testing.T, h *netns.Host, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := h.Command(ctx, rdmamgrBin, args...).CombinedOutput()
	return string(out), err
}

// creds holds a deployment's certificates for the hosts of a net.
type creds struct{ dir string }

// makeCreds issues a CA and one certificate per host (valid for its
// address) into a fresh directory.
func makeCreds(t *testing.T, hosts []*netns.Host) creds {
	t.Helper()
	dir := t.TempDir()
	args := []string{"certs", "--dir", dir}
	for _, h := range hosts {
		args = append(args, "--host", h.Name+"="+h.Addr)
	}
	if out, err := exec.Command(rdmamgrBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("rdmamgr certs: %v\n%s", err, out)
	}
	return creds{dir: dir}
}

// flags returns the TLS flags for host h.
func (c creds) flags(h *netns.Host) []string {
	return []string{"--tls-ca", filepath.Join(c.dir, "ca.crt"),
		"--tls-cert", filepath.Join(c.dir, h.Name+".crt"), "--tls-key", filepath.Join(c.dir, h.Name+".key")}
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
