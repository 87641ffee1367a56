// Package etcdtest runs a real one-node etcd for tests: Start runs it on
// loopback (free ports, a temporary data directory) and kills it when the
// test ends. Where no etcd binary is installed the test skips, saying
// why, unless RDMAMGR_REQUIRE_NETNS=1 (set by .ci/run): then it fails.
package etcdtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
)

// Start runs a one-node etcd on loopback for t and returns its client
// address (host:port).
func Start(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		msg := "needs etcd (apt-get install etcd-server)"
		if os.Getenv("RDMAMGR_REQUIRE_NETNS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ports := make([]int, 2)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	client := fmt.Sprintf("127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cmd := exec.Command(bin, "--name", "t", "--data-dir", t.TempDir(),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer,
		"--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return client
}
