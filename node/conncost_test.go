package node

import (
	"context"
	"crypto/tls"
	"os"
	"runtime"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/certs"
	"github.com/rdmamgr/rdmamgr/remoteguard"
)

// TestControlConnCost reports what one control-plane peering costs in
// memory: n actor systems with remote, each with a manager, and a hub that
// asks each for its status, so that every pair holds protoactor's two gRPC
// connections (one each way, as replies travel on the peer's own). Both
// ends live in this process, so the figure covers both. It asserts only
// that everything answered; with the TLS figure it is the basis of the
// README's deployment cost. The nodes are left running (closing many
// remotes in one process hangs in protoactor; the test process exits).
func TestControlConnCost(t *testing.T) {
	if os.Getenv("RDMAMGR_CONNCOST") != "1" {
		t.Skip("a measurement: RDMAMGR_CONNCOST=1 go test -run ControlConnCost -v ./node")
	}
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"mutual TLS", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 40
			var cfg Config
			if tc.tls {
				cfg.ServerTLS, cfg.ClientTLS = testTLS(t)
			}
			// Every peer dials the hub from 127.0.0.1: lift the per-IP cap.
			hubCfg := cfg
			hubCfg.NoManager = true
			hubCfg.Remote = remoteguard.Config{MaxConns: 4 * n, MaxConnsPerIP: 4 * n, MaxStreams: 4 * n}
			hubNode, err := Start(context.Background(), hubCfg)
			if err != nil {
				t.Fatal(err)
			}
			hub := hubNode.System()
			var pids []*protoactor.PID
			for range n {
				nd, err := Start(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, nd.ManagerPID())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// One round to warm up whatever is made once per process.
			if _, err := actor.NewClient(hub, pids[0]).Status(ctx); err != nil {
				t.Fatal(err)
			}
			before := memInUse()
			g0 := runtime.NumGoroutine()
			for _, p := range pids[1:] {
				if _, err := actor.NewClient(hub, p).Status(ctx); err != nil {
					t.Fatal(err)
				}
			}
			after := memInUse()
			per := (after - before) / uint64(n-1)
			t.Logf("control peering (%s): %d KiB and %d goroutines per pair, both ends together (2 gRPC connections)",
				tc.name, per>>10, (runtime.NumGoroutine()-g0)/(n-1))
		})
	}
}

func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// testTLS returns mutual TLS configurations with a fresh CA.
func testTLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	ca, err := certs.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	cr, err := ca.Credentials("host", nil)
	if err != nil {
		t.Fatal(err)
	}
	return cr.Server, cr.Client
}
