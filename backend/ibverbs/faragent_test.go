//go:build ibverbs

package ibverbs

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/internal/agentapi"
)

// TestRouteFarIsAgent: a route says whether its peer is a host agent
// (agentapi.FarAgent) from the infoAgent bit of the info the peer sent:
// a host agent's far route to a manager that is no agent is dropped on
// it. No device: the route is built from decoded info, never posted on.
func TestRouteFarIsAgent(t *testing.T) {
	b := &Backend{cfg: DefaultConfig(), inflight: 4}
	for _, agent := range []bool{false, true} {
		ri := goodInfo()
		if agent {
			ri.flags |= infoAgent
		}
		info, err := decodeRouteInfo(ri.encode())
		if err != nil {
			t.Fatal(err)
		}
		for _, accepted := range []bool{false, true} {
			var r any = newRoute(b, 1, nil, nil, accepted, info, nil)
			fa, ok := r.(agentapi.FarAgent)
			if !ok {
				t.Fatal("an ibverbs route does not implement agentapi.FarAgent")
			}
			if got := fa.FarIsAgent(); got != agent {
				t.Errorf("info agent %v (accepted %v): FarIsAgent %v", agent, accepted, got)
			}
		}
	}
}
