//go:build linux

package crosshost

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/test/netns"
)

// bench runs `rdmamgr bench --verify` from h against addr and fails t
// unless every byte checked out.
func bench(t *testing.T, h *netns.Host, addr, op string, extra ...string) string {
	t.Helper()
	args := cat([]string{"bench", "--peer", addr, "--op", op, "--size", "256KiB", "--count", "64",
		"--concurrency", "4", "--verify", "--backend", "tcp", "--timeout", "60s"}, extra)
	out, err := run(t, h, 90*time.Second, args...)
	if err != nil || !strings.Contains(out, "verify: ok") {
		t.Fatalf("%s: bench %s to %s: %v\n%s", h.Name, op, addr, err, out)
	}
	return out
}

// Wildcard binds advertise the host's address; bytes move both ways
// between every pair of hosts, verified, over mutual TLS, and with
// --data-tls.
func TestBytesAcrossHosts(t *testing.T) {
	nt := netns.New(t, 3)
	h1, h2, h3 := nt.Hosts[0], nt.Hosts[1], nt.Hosts[2]
	c := makeCreds(t, nt.Hosts)
	ds := []*daemon{
		serve(t, h1, cat([]string{"--listen", ":7000"}, c.flags(h1))...),
		serve(t, h2, cat([]string{"--listen", "0.0.0.0:7000"}, c.flags(h2))...),
		serve(t, h3, cat([]string{"--listen", "[::]:7000"}, c.flags(h3))...),
	}
	for i, d := range ds {
		h := nt.Hosts[i]
		if want := h.Addr + ":7000"; d.addr != want {
			t.Fatalf("%s: ready %s, want the host's address %s\n%s", h.Name, d.addr, want, d.log)
		}
		if !eventually(func() bool { return strings.Contains(d.log.String(), "advertising a routable address") }) {
			t.Errorf("%s: the picked address is not logged:\n%s", h.Name, d.log)
		}
	}
	for i, from := range nt.Hosts {
		to := ds[(i+1)%3]
		for _, op := range []string{"put", "get"} {
			bench(t, from, to.addr, op, c.flags(from)...)
		}
	}
	// The data listener is advertised at the host's address too.
	out, err := run(t, h3, 30*time.Second, cat([]string{"status", "--peer", ds[0].addr}, c.flags(h3))...)
	if err != nil || !strings.Contains(out, "data "+h1.Addr+":") {
		t.Fatalf("status of h1 from h3: %v\n%s", err, out)
	}

	// --data-tls on both ends.
	dt := serve(t, h1, cat([]string{"--listen", ":7001", "--data-tls"}, c.flags(h1))...)
	for _, op := range []string{"put", "get"} {
		bench(t, h2, dt.addr, op, cat([]string{"--data-tls"}, c.flags(h2))...)
	}
	// A client without --data-tls is refused by a --data-tls daemon.
	out, err = run(t, h2, 60*time.Second, cat([]string{"bench", "--peer", dt.addr, "--count", "2", "--size", "4KiB",
		"--backend", "tcp", "--timeout", "30s"}, c.flags(h2))...)
	if err == nil {
		t.Fatalf("plain data connection to a --data-tls daemon worked:\n%s", out)
	}
}

// A peer without credentials, or with a certificate of another CA, gets
// nothing; refusals are counted and logged; a manager without credentials
// refuses a wildcard bind; a loopback reply address toward another host is an
// immediate error.
func TestHostileAcrossHosts(t *testing.T) {
	nt := netns.New(t, 3)
	h1, h2, h3 := nt.Hosts[0], nt.Hosts[1], nt.Hosts[2]
	c := makeCreds(t, nt.Hosts)
	other := makeCreds(t, nt.Hosts) // another deployment's CA
	d := serve(t, h1, cat([]string{"--listen", ":7000"}, c.flags(h1))...)

	cases := map[string][]string{
		"status without credentials":        {"status", "--peer", d.addr, "--timeout", "4s"},
		"status with another CA":            cat([]string{"status", "--peer", d.addr, "--timeout", "4s"}, other.flags(h2)),
		"bench with another CA":             cat([]string{"bench", "--peer", d.addr, "--size", "16MiB", "--count", "4", "--backend", "tcp", "--timeout", "6s"}, other.flags(h2)),
		"bench with another CA, --data-tls": cat([]string{"bench", "--peer", d.addr, "--size", "16MiB", "--count", "4", "--backend", "tcp", "--timeout", "6s", "--data-tls"}, other.flags(h2)),
	}
	errs := make(chan error, len(cases))
	for name, args := range cases {
		go func() {
			out, err := run(t, h2, 60*time.Second, args...)
			if err == nil {
				errs <- fmt.Errorf("%s: succeeded:\n%s", name, out)
				return
			}
			errs <- nil
		}()
	}
	for range cases {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// Nothing was allocated for them, and the refusals were logged.
	out, err := run(t, h3, 30*time.Second, cat([]string{"status", "--peer", d.addr}, c.flags(h3))...)
	if err != nil || !strings.Contains(out, "buffers: 0, 0 B registered") {
		t.Fatalf("status after the refusals: %v\n%s", err, out)
	}
	if !eventually(func() bool { return strings.Contains(d.log.String(), "control plane refused a peer") }) {
		t.Errorf("no refusal logged:\n%s", d.log)
	}
	if !regexp.MustCompile(`(?m)^\s+tls\s+[1-9]`).MatchString(out) {
		t.Errorf("status does not count the TLS refusals:\n%s", out)
	}

	// Without credentials, a wildcard bind refuses to start (issue 23: it
	// bound loopback and reported ready).
	if out, err := run(t, h3, 30*time.Second, "serve", "--listen", "0.0.0.0:7002"); proc.ExitCode(err) != 2 ||
		!strings.Contains(out, "--tls-ca") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("serve without credentials on 0.0.0.0: %v, want exit 2 and one line:\n%s", err, out)
	}

	// A loopback reply address toward another host fails at once.
	start := time.Now()
	out, err = run(t, h2, 60*time.Second, cat([]string{"status", "--peer", d.addr, "--listen", "127.0.0.1:0"}, c.flags(h2))...)
	if err == nil || !strings.Contains(out, "reply address unreachable") {
		t.Fatalf("status with a loopback reply address: %v\n%s", err, out)
	}
	t.Logf("loopback reply address refused after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
}

// A daemon killed with SIGKILL fails the client; restarted at the same
// address it serves again.
func TestKillRestartAcrossHosts(t *testing.T) {
	nt := netns.New(t, 2)
	h1, h2 := nt.Hosts[0], nt.Hosts[1]
	c := makeCreds(t, nt.Hosts)
	args := cat([]string{"--listen", ":7000"}, c.flags(h1))
	d := serve(t, h1, args...)
	bench(t, h2, d.addr, "put", c.flags(h2)...)
	d.kill()
	out, err := run(t, h2, 60*time.Second, cat([]string{"bench", "--peer", d.addr, "--count", "4", "--size", "4KiB",
		"--backend", "tcp", "--timeout", "10s"}, c.flags(h2))...)
	if err == nil {
		t.Fatalf("bench against a killed daemon succeeded:\n%s", out)
	}
	var d2 *daemon
	for i := 0; ; i++ {
		var err error
		if d2, err = startServe(h1, args...); err == nil {
			break
		} else if i == 20 {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Cleanup(func() { d2.stop(t) })
	bench(t, h2, d2.addr, "get", c.flags(h2)...)
}

// Bounded verified load from every host to the others at once.
func TestSoakAcrossHosts(t *testing.T) {
	nt := netns.New(t, 3)
	c := makeCreds(t, nt.Hosts)
	var ds []*daemon
	for _, h := range nt.Hosts {
		ds = append(ds, serve(t, h, cat([]string{"--listen", ":7000"}, c.flags(h))...))
	}
	const rounds = 5
	for r := 0; r < rounds; r++ {
		errs := make(chan error, 6)
		for i, from := range nt.Hosts {
			for j, to := range ds {
				if i == j {
					continue
				}
				op := []string{"put", "get"}[(i+j+r)%2]
				go func() {
					out, err := run(t, from, 120*time.Second, cat([]string{"bench", "--peer", to.addr, "--op", op,
						"--size", []string{"64KiB", "1MiB", "4KiB"}[r%3], "--count", "200", "--concurrency", "8",
						"--verify", "--backend", "tcp", "--timeout", "90s"}, c.flags(from))...)
					if err == nil && !strings.Contains(out, "verify: ok") {
						err = fmt.Errorf("no verify line")
					}
					if err != nil {
						err = fmt.Errorf("round %d %s->%s %s: %v\n%s", r, from.Name, to.host.Name, op, err, out)
					}
					errs <- err
				}()
			}
		}
		for k := 0; k < 6; k++ {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}
	for i, d := range ds {
		from := nt.Hosts[(i+1)%3]
		out, err := run(t, from, 30*time.Second, cat([]string{"status", "--peer", d.addr}, c.flags(from))...)
		if err != nil || !strings.Contains(out, "buffers: 0,") {
			t.Errorf("%s after the soak: %v\n%s", d.host.Name, err, out)
		}
	}
}

// eventually polls ok for up to 5 s: a child's stderr arrives through a
// copying goroutine, after what it printed on stdout.
func eventually(ok func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
