package node

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Nodes start while other nodes of the process, and a plain gRPC client
// of the program's own, talk: under -race this must report no data race.
// protoactor's remote.Start writes grpc's global logger on every start,
// which every grpc goroutine reads: with node.Start on protoactor's remote
// this reported races between grpclog.SetLoggerV2 and grpc's channelz and
// transport goroutines on every run (issue 22). remoteguard's own transport
// writes no gRPC global.
func TestStartWhileGRPCTalks(t *testing.T) {
	grpcTalk(t)
}

// grpcTalk starts four nodes, a plain gRPC server (grpc's health service)
// with clients of the program's own, and has them all talk: each node
// pings the one before it, one client calls on one connection and one on
// a new connection per call (connection state changes are what grpc logs
// most, through channelz). The first node starts, the gRPC clients talk,
// and every later node starts while all before it talk. It returns once
// every talker has done a few rounds.
func grpcTalk(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var wg, warm sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	talk := func(what string, f func() error) {
		wg.Add(1)
		warm.Add(1)
		go func() {
			defer wg.Done()
			rounds := 0
			defer func() {
				if rounds < 3 {
					warm.Done()
				}
			}()
			for ctx.Err() == nil {
				if err := f(); err != nil && ctx.Err() == nil {
					t.Errorf("%s: %v", what, err)
					return
				}
				if rounds++; rounds == 3 {
					warm.Done()
				}
			}
		}()
	}
	const count = 4
	var nodes []*Node
	start := func() { nodes = append(nodes, startNode(t, Config{Backend: backend.KindTCP})) }
	start()

	target := healthServer(t)
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() }) // after the talkers end
	hc := healthpb.NewHealthClient(cc)
	talk("health check", func() error {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
	talk("health check on a new connection", func() error {
		c, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})

	for i := 1; i < count; i++ {
		start()
		n, peer := nodes[i], nodes[i-1]
		talk("ping "+peer.Addr(), func() error {
			_, err := n.ClientOf(peer.Addr(), "").Ping(ctx)
			return err
		})
		if _, err := peer.ClientOf(n.Addr(), "").Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	warm.Wait()
}

// healthServer runs a plain gRPC server (grpc's health service) on a
// loopback port until the test ends, and returns its address.
func healthServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}
