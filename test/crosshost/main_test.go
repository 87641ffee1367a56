//go:build linux

package crosshost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
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
	if err := proc.Build("github.com/rdmamgr/rdmamgr/cmd/rdmamgr", rdmamgrBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	netns.Sweep()
	// Daemons' admin listeners pick a port: several daemons share a host.
	os.Setenv("RDMAMGR_METRICS_LISTEN", "127.0.0.1:0")
	return m.Run()
}

// daemon is `rdmamgr serve` running in a host.
type daemon struct {
	host *netns.Host
	p    *proc.Proc
	addr string // what it printed after "ready"
	log  *proc.Buffer
}

// serve starts `rdmamgr serve ARGS` in h and waits for "ready ADDR". The
// daemon is stopped (SIGTERM, then SIGKILL; it must exit 0 unless killed)
// when t ends.
func serve(t *testing.T, h *netns.Host, args ...string) *daemon {
	t.Helper()
	d, err := startServe(h, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(t) })
	return d
}

func startServe(h *netns.Host, args ...string) (*daemon, error) {
	d := &daemon{host: h, log: &proc.Buffer{}}
	path, argv := h.Wrap(rdmamgrBin, append([]string{"serve", "--backend", "tcp"}, args...)...)
	p, err := proc.Start(context.Background(), proc.Spec{Name: h.Name + ": serve", Path: path, Args: argv, Stderr: d.log})
	if err != nil {
		return nil, fmt.Errorf("%s: serve %v: %w\n%s", h.Name, args, err, d.log)
	}
	d.p, d.addr = p, p.Addr
	return d, nil
}

// stop ends the daemon with SIGTERM (SIGKILL after 20 s) and waits; it
// must exit 0 unless it was killed.
func (d *daemon) stop(t *testing.T) {
	if err := d.p.Stop(20 * time.Second); err != nil {
		t.Errorf("%v\n%s", err, d.log)
	}
}

// kill ends the daemon with SIGKILL and waits.
func (d *daemon) kill() { _ = d.p.Kill() }

// spec is a process that runs the rdmamgr CLI (or another program) in h,
// its stdout and stderr both going to out.
func spec(h *netns.Host, out *proc.Buffer, name string, args ...string) proc.Spec {
	path, argv := h.Wrap(name, args...)
	return proc.Spec{Name: h.Name + ": " + filepath.Base(name), Path: path, Args: argv, Stdout: out, Stderr: out}
}

// run runs the rdmamgr CLI in h with a time bound and returns its combined
// output.
func run(t *testing.T, h *netns.Host, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out proc.Buffer
	err := proc.Run(ctx, spec(h, &out, rdmamgrBin, args...))
	return out.String(), err
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
	var out proc.Buffer
	if err := proc.Run(context.Background(), proc.Spec{Path: rdmamgrBin, Args: args, Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("rdmamgr certs: %v\n%s", err, out.String())
	}
	return creds{dir: dir}
}

// issue issues one more certificate, NAME=ADDR, into c's directory.
func (c creds) issue(t *testing.T, name, addr string) {
	t.Helper()
	var out proc.Buffer
	if err := proc.Run(context.Background(), proc.Spec{Path: rdmamgrBin, Args: []string{"certs", "--dir", c.dir, "--host", name + "=" + addr},
		Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("rdmamgr certs: %v\n%s", err, out.String())
	}
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
