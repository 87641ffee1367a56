// Package netns makes test hosts: network namespaces on this machine,
// joined by veth pairs to a bridge that lives in a namespace of its own,
// with addresses in a private test subnet (10.212.0.0/24) that exists only
// inside those namespaces. Tests run processes inside a host with
// Host.Command (`ip netns exec`), so their traffic goes only to the
// namespaced hosts (or their own loopback), never to the machine's
// interfaces or anywhere else.
//
// Everything a Net makes is named PREFIX-PID-…, and New removes it again in
// t.Cleanup, also when the test fails (processes still in a namespace are
// killed first). New also sweeps what a killed test binary left behind:
// namespaces with the prefix whose PID is no longer alive.
//
// Making namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the
// ip command. Require skips a test that cannot have them with a message
// saying why, or fails it when RDMAMGR_REQUIRE_NETNS=1 (CI sets it, so the
// cross-host suite cannot silently not run).
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Prefix starts the name of every namespace this package makes.
const Prefix = "rdmt"

// Subnet is the test subnet; host i (1-based) is Subnet.i.
const Subnet = "10.212.0"

// Net is a set of test hosts on one bridge.
type Net struct {
	id     string // PREFIX-PID-N
	bridge string // namespace of the bridge
	Hosts  []*Host
}

// Host is one namespaced host.
type Host struct {
	Name string // h1, h2, ...
	NS   string // namespace name
	Addr string // its address in Subnet
}

var seq struct {
	mu sync.Mutex
	n  int
}

// Require skips (or, with RDMAMGR_REQUIRE_NETNS=1, fails) t when test
// hosts cannot be made here.
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		msg := fmt.Sprintf("cross-host tests need network namespaces: %v (run as root with iproute2; CI sets RDMAMGR_REQUIRE_NETNS=1)", err)
		if os.Getenv("RDMAMGR_REQUIRE_NETNS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// Available reports why namespaces cannot be made, or nil.
func Available() error {
	if runtime.GOOS != "linux" {
		return errors.New("network namespaces are Linux only")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("no ip command (iproute2)")
	}
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	name := fmt.Sprintf("%s-%d-probe", Prefix, os.Getpid())
	if err := ip("netns", "add", name); err != nil {
		return err
	}
	return ip("netns", "del", name)
}

// New makes n hosts h1..hn at Subnet.1..n and removes them when t ends.
func New(t testing.TB, n int) *Net {
	t.Helper()
	Require(t)
	if n < 1 || n > 200 {
		t.Fatalf("netns: %d hosts", n)
	}
	Sweep()
	seq.mu.Lock()
	seq.n++
	id := fmt.Sprintf("%s-%d-%d", Prefix, os.Getpid(), seq.n)
	seq.mu.Unlock()
	nt := &Net{id: id, bridge: id + "-br"}
	t.Cleanup(nt.remove)
	must := func(args ...string) {
		t.Helper()
		if err := ip(args...); err != nil {
			t.Fatalf("netns: %v", err)
		}
	}
	must("netns", "add", nt.bridge)
	must("-n", nt.bridge, "link", "add", "br0", "type", "bridge")
	must("-n", nt.bridge, "link", "set", "br0", "up")
	for i := 1; i <= n; i++ {
		h := &Host{Name: fmt.Sprintf("h%d", i), NS: fmt.Sprintf("%s-h%d", id, i), Addr: fmt.Sprintf("%s.%d", Subnet, i)}
		nt.Hosts = append(nt.Hosts, h)
		port := fmt.Sprintf("p%d", i)
		must("netns", "add", h.NS)
		must("-n", h.NS, "link", "set", "lo", "up")
		// The veth is made inside the bridge's namespace with its peer
		// straight in the host's: no interface ever exists outside them.
		must("-n", nt.bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
		must("-n", nt.bridge, "link", "set", port, "master", "br0")
		must("-n", nt.bridge, "link", "set", port, "up")
		must("-n", h.NS, "addr", "add", h.Addr+"/24", "dev", "eth0")
		must("-n", h.NS, "link", "set", "eth0", "up")
	}
	return nt
}

// Command returns a command that runs name inside h. Its process gets
// SIGKILL if the test process dies.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path, args := h.Wrap(name, args...)
	c := exec.CommandContext(ctx, path, args...)
	c.SysProcAttr = deathSignal()
	return c
}

// Wrap returns the program and arguments that run name args inside h
// (`ip netns exec`), for starters of processes other than Command.
func (h *Host) Wrap(name string, args ...string) (string, []string) {
	return "ip", append([]string{"netns", "exec", h.NS, name}, args...)
}

// remove kills what still runs in the namespaces and deletes them.
func (nt *Net) remove() {
	for _, h := range nt.Hosts {
		removeNS(h.NS)
	}
	removeNS(nt.bridge)
}

// Sweep removes namespaces with the prefix left by processes that are gone.
func Sweep() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, Prefix+"-")
		if !ok {
			continue
		}
		pidS, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidS)
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		removeNS(name)
	}
}

// removeNS kills the processes in ns and deletes it, retrying briefly while
// they exit.
func removeNS(ns string) {
	for i := 0; i < 50; i++ {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				kill(pid)
			}
		}
		if ip("netns", "del", ns) == nil || !exists(ns) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func exists(ns string) bool {
	_, err := os.Stat("/run/netns/" + ns)
	return err == nil
}

func ip(args ...string) error {
	var stderr bytes.Buffer
	c := exec.Command("ip", args...)
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
