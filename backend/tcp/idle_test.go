package tcp

import (
	"runtime"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/testscale"
)

// TestThousandIdleRoutes opens 1,000 routes between two backends, checks
// they all stay up across heartbeats and still move data, and reports the
// memory an idle route costs (both ends, since both live in this process).
func TestThousandIdleRoutes(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 routes")
	}
	// Each route is two connections, an fd at each end, all in this
	// process: a machine that allows fewer open files gets fewer routes.
	n := 1000
	if limit := testscale.OpenFiles(); limit < 4*n+200 {
		n = (limit - 200) / 4
		t.Logf("%d open files allowed: %d routes", limit, n)
	}
	// Heartbeats keep idle routes up: pings every 200 ms, and a peer
	// timeout long enough that a machine slowed by -race and load does
	// not fail a route whose peer answers.
	cfg := Config{HeartbeatInterval: 200 * time.Millisecond, PeerTimeout: testscale.Timeout(6 * time.Second)}
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	// HelloTimeout scaled too: under -race and load 1,000 handshakes
	// beside 5,000 pings a second can take a hello past its 3 s.
	b, regB := newBackend(t, Config{MaxConnsPerPeer: 2 * n * DefaultConfig().ConnsPerRoute, HelloTimeout: testscale.Timeout(3 * time.Second)}, backendtest.OwnerB)
	before := memInUse()
	routes := make([]backend.Route, 0, n)
	for range n {
		routes = append(routes, backendtest.MustConnect(t, waitTimeout, a, b, backendtest.OwnerB, backendtest.OwnerA))
	}
	after := memInUse()
	per := (after - before) / uint64(n)
	t.Logf("%d idle routes (%d connections each): %d KiB each, both ends together", n, DefaultConfig().ConnsPerRoute, per>>10)
	if per > 128<<10 {
		t.Errorf("an idle route costs %d KiB for both ends, want at most 128 KiB (64 KiB a side)", per>>10)
	}
	time.Sleep(3 * cfg.HeartbeatInterval)
	for i, r := range routes {
		select {
		case <-r.Done():
			t.Fatalf("route %d went down while idle: %v", i, r.Err())
		default:
		}
	}
	for _, i := range []int{0, n / 2, n - 1} {
		backendtest.CheckRoute(t, waitTimeout, routes[i], regA, regB)
	}
}

// memInUse is heap plus goroutine stacks after a GC.
func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}
