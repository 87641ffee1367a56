package node

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

// protoactorLeftovers are goroutines protoactor leaves behind for a while
// after an actor system shuts down: the dead-letter throttle's timer ends
// by itself after its period (a second). Not ours to wait for.
var protoactorLeftovers = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
}

func prometheusRegistry(t *testing.T, n *Node) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(n.Collector()); err != nil {
		t.Fatal(err)
	}
	return reg
}

// childEnv names the test a child process runs (isolated).
const childEnv = "RDMAMGR_NODE_TEST_CHILD"

// isolated runs the calling test in a process of its own under the race
// detector, and reports whether the caller should run the test body here
// (false: the child ran it, and its failure failed t). protoactor's
// remote.Start writes grpc's global logger without synchronisation
// (upstream), and grpc's goroutines read it on every connection event: a
// remote started after other remotes' gRPC traffic in the same process is
// a data race to the detector, however far apart in time, even when those
// goroutines have ended. In a process of its own a test starts its nodes
// before any traffic, and remoteguard.Start orders the starts among
// themselves. Without the race detector the test runs here.
func isolated(t *testing.T) bool {
	t.Helper()
	if !raceEnabled || os.Getenv(childEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err == nil && strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skipf("skipped in a process of its own:\n%s", out)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in a process of its own: %v\n%s", t.Name(), err, out)
	}
	return false
}
