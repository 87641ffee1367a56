package netns

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Hosts reach each other through the bridge and nothing else: each has
// only lo and eth0, and the subnet is absent from the test's own namespace.
func TestHostsReachEachOther(t *testing.T) {
	nt := New(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, h := range nt.Hosts {
		out, err := h.Command(ctx, "ip", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil || !strings.Contains(string(out), h.Addr+"/24") {
			t.Fatalf("%s: eth0: %v\n%s", h.Name, err, out)
		}
	}
	out, _ := exec.Command("ip", "-o", "addr").Output()
	if strings.Contains(string(out), Subnet+".") {
		t.Fatalf("test subnet visible outside the namespaces:\n%s", out)
	}
}

// Cleanup removes the namespaces, and Sweep removes those of dead
// processes.
func TestRemoved(t *testing.T) {
	var ns []string
	t.Run("make", func(t *testing.T) {
		nt := New(t, 2)
		for _, h := range nt.Hosts {
			ns = append(ns, h.NS)
		}
		ns = append(ns, nt.bridge)
	})
	for _, n := range ns {
		if exists(n) {
			t.Errorf("namespace %s left after the test", n)
		}
	}
	// A namespace named for a PID that cannot exist is swept.
	stale := Prefix + "-999999999-1-h1"
	if err := ip("netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	Sweep()
	if exists(stale) {
		removeNS(stale)
		t.Fatal("Sweep left a namespace of a dead process")
	}
}
