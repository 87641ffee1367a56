//go:build linux

package crosshost

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/test/netns"
)

// startEtcd runs a one-node etcd on h, serving clients at h's address over
// TLS with client certificates from c's CA (its own certificate is issued
// into c's directory as etcd.crt); it is killed when t ends. It returns the
// client endpoint and the process.
func startEtcd(t *testing.T, h *netns.Host, c creds) (string, *proc.Proc) {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		msg := "membership tests need etcd (apt-get install etcd-server)"
		if os.Getenv("RDMAMGR_REQUIRE_NETNS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	c.issue(t, "etcd", h.Addr)
	ep := h.Addr + ":2379"
	var log proc.Buffer
	p, err := proc.Spawn(spec(h, &log, bin, "--name", "e1", "--data-dir", t.TempDir(),
		"--listen-client-urls", "https://"+ep, "--advertise-client-urls", "https://"+ep,
		"--client-cert-auth", "--trusted-ca-file", filepath.Join(c.dir, "ca.crt"),
		"--cert-file", filepath.Join(c.dir, "etcd.crt"), "--key-file", filepath.Join(c.dir, "etcd.key"),
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "e1=http://127.0.0.1:2380", "--log-level", "error"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return ep, p
}

// members lists the cluster from h, with h's certificate.
func members(t *testing.T, h *netns.Host, ep string, c creds) (string, error) {
	return run(t, h, 30*time.Second, cat([]string{"members", "--etcd", ep, "--cluster", "t"}, c.flags(h))...)
}

// Three hosts find each other by name through etcd; a killed member leaves
// within its lease TTL; etcd going away leaves a running transfer alone.
func TestMembership(t *testing.T) {
	nt := netns.New(t, 3)
	h1, h2, h3 := nt.Hosts[0], nt.Hosts[1], nt.Hosts[2]
	c := makeCreds(t, nt.Hosts)
	ep, etcd := startEtcd(t, h1, c)
	waitEtcd(t, h2, ep, c)
	const ttl = 3 * time.Second
	cluster := []string{"--etcd", ep, "--cluster", "t"}
	var ds []*daemon
	for _, h := range nt.Hosts {
		ds = append(ds, serve(t, h, cat([]string{"--listen", ":7000", "--member", h.Name, "--lease-ttl", ttl.String()},
			cluster, c.flags(h))...))
	}
	out, err := members(t, h3, ep, c)
	if err != nil {
		t.Fatalf("members: %v\n%s", err, out)
	}
	for i, h := range nt.Hosts {
		if !strings.Contains(out, h.Name+" "+ds[i].addr+" ") {
			t.Fatalf("members lacks %s at %s:\n%s", h.Name, ds[i].addr, out)
		}
	}
	// By name, from every host to the next.
	for i, from := range nt.Hosts {
		to := nt.Hosts[(i+1)%3]
		bench(t, from, to.Name, "put", cat(cluster, c.flags(from))...)
	}

	// A killed member leaves when its lease ends.
	ds[2].kill()
	killed := time.Now()
	var left time.Duration
	for {
		out, err := members(t, h1, ep, c)
		if err == nil && !strings.Contains(out, h3.Name+" ") {
			left = time.Since(killed)
			break
		}
		if time.Since(killed) > 60*time.Second {
			t.Fatalf("killed member still listed after 60 s:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("killed member left %v after SIGKILL (lease TTL %v)", left.Round(10*time.Millisecond), ttl)
	// The property under test is "within the lease TTL"; the slack covers
	// etcd's expiry tick and a loaded machine.
	if left > ttl+3*time.Second {
		t.Errorf("killed member left after %v, lease TTL %v", left, ttl)
	}

	// etcd goes away during a transfer found by name: it completes.
	bctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bout := &proc.Buffer{}
	bspec := spec(h2, bout, rdmamgrBin, cat([]string{"bench", "--peer", h1.Name, "--op", "put", "--size", "1MiB",
		"--count", "2000", "--concurrency", "4", "--verify", "--backend", "tcp", "--timeout", "100s"}, cluster, c.flags(h2))...)
	bdone := make(chan error, 1)
	go func() { bdone <- proc.Run(bctx, bspec) }()
	time.Sleep(1500 * time.Millisecond)
	_ = etcd.Kill()
	var stillRunning bool
	select {
	case err := <-bdone:
		bdone <- err
	default:
		stillRunning = true
	}
	if err := <-bdone; err != nil || !strings.Contains(bout.String(), "verify: ok") {
		t.Fatalf("transfer across etcd's death: %v\n%s", err, bout)
	}
	if !stillRunning {
		t.Log("note: the transfer ended before etcd was killed")
	}
	// Routes that were up keep working: status by address from h3.
	out, err = run(t, h3, 30*time.Second, cat([]string{"status", "--peer", ds[0].addr}, c.flags(h3))...)
	if err != nil {
		t.Fatalf("status with etcd gone: %v\n%s", err, out)
	}
	bench(t, h2, ds[0].addr, "get", c.flags(h2)...)
}

// waitEtcd polls until etcd on ep answers from h.
func waitEtcd(t *testing.T, h *netns.Host, ep string, c creds) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := members(t, h, ep, c); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("etcd not serving: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A member that stops answering (SIGSTOP: its sockets stay open) loses its
// routes when its lease ends: a client following the cluster fails its
// transfer with the peer gone, by membership, before the data plane's own
// heartbeat (4 s) would notice.
func TestLeaseEndsRoutes(t *testing.T) {
	nt := netns.New(t, 3)
	h1, h2, h3 := nt.Hosts[0], nt.Hosts[1], nt.Hosts[2]
	c := makeCreds(t, nt.Hosts)
	ep, _ := startEtcd(t, h1, c)
	waitEtcd(t, h2, ep, c)
	cluster := []string{"--etcd", ep, "--cluster", "t"}
	d := serve(t, h3, cat([]string{"--listen", ":7000", "--member", "h3", "--lease-ttl", "1s"}, cluster, c.flags(h3))...)
	t.Cleanup(func() { _ = d.p.Signal(syscall.SIGCONT) }) // runs before the daemon's stop

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out := &proc.Buffer{}
	bspec := spec(h2, out, rdmamgrBin, cat([]string{"bench", "--peer", "h3", "--op", "put", "--size", "1MiB",
		"--count", "10000", "--concurrency", "1", "--backend", "tcp", "--timeout", "60s"}, cluster, c.flags(h2))...)
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx, bspec) }()
	time.Sleep(2 * time.Second) // the route is up and busy
	if err := d.p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	err := <-done
	took := time.Since(stopped)
	if err == nil {
		t.Fatalf("transfer to a frozen member succeeded:\n%s", out)
	}
	if !strings.Contains(out.String(), "membership lease ended") || !strings.Contains(out.String(), "peer gone") {
		t.Fatalf("transfer did not end by membership (peer gone, lease ended):\n%s", out)
	}
	// took includes bench's clean-up, which waits out its requests to
	// release the frozen peer's buffer.
	t.Logf("bench against a frozen member exited %v after SIGSTOP (lease TTL 1 s): %s", took.Round(10*time.Millisecond),
		lastLine(out.String()))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
