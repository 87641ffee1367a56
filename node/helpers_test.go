package node

import (
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
