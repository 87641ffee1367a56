package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// freePort is a loopback port free at the time of the call.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// serve --etcd starts while etcd is down (it exited after 5 s) and
// registers once etcd comes; members says so when a cluster has none
// (issue 23 point 7).
func TestServeStartsWhileEtcdIsDown(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("needs etcd (apt-get install etcd-server)")
	}
	client := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	d := startDaemon(t, "--etcd", client, "--cluster", "late", "--member", "m1")
	waitFor(t, "the etcd warning", func() bool { return strings.Contains(d.stderr.String(), "etcd not reachable") })

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--name", "t", "--data-dir", t.TempDir(),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer,
		"--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })

	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	for {
		out, _, _ := runBin(t, rctx, "members", "--etcd", client, "--cluster", "late")
		if strings.Contains(out, "m1 "+d.addr) {
			break
		}
		if rctx.Err() != nil {
			t.Fatalf("m1 never registered once etcd came:\n%s\n%s", out, d.stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
	out, _, code := runBin(t, rctx, "members", "--etcd", client, "--cluster", "nobody")
	if code != 0 || !strings.Contains(out, `no members in cluster "nobody"`) {
		t.Errorf("members of an empty cluster: exit %d\n%s", code, out)
	}
}
