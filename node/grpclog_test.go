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
//
// protoactor's remote.Start writes grpc's global logger
// (grpclog.SetLoggerV2, remote/server.go:61) without synchronisation, and
// every grpc goroutine reads it when it logs: the transports of the nodes
// already talking and those of the program's own client. A node whose
// start calls remote.Start while they run is a data race (issue 22). The
// test fails under -race on every run while node.Start calls remote.Start
// per node (checked: with the Skip removed, `go test -race -run
// TestStartWhileGRPCTalks ./node/` reports races between
// grpclog.SetLoggerV2 under remoteguard.Start and grpc's channelz and
// transport goroutines); it is skipped until the fix (doc.go).
func TestStartWhileGRPCTalks(t *testing.T) {
	if !isolated(t) {
		return
	}
	grpcTalk(t, false)
}

// The way round the race until it is fixed (doc.go): every node of the
// process starts before any of them, or the program's own gRPC, talks;
// then they all talk. remoteguard.Start orders the starts among themselves
// (its probe), and everything that reads grpc's logger starts after the
// last write. Under -race this reports no data race.
func TestStartBeforeGRPCTalks(t *testing.T) {
	if !isolated(t) {
		return
	}
	grpcTalk(t, true)
}

// grpcTalk starts four nodes, a plain gRPC server (grpc's health service)
// with clients of the program's own, and has them all talk: each node
// pings the one before it, one client calls on one connection and one on
// a new connection per call (connection state changes are what grpc logs
// most, through channelz). With startFirst every node starts before
// anything talks; without, the first node starts, the gRPC clients talk,
// and every later node starts while all before it talk. It returns once
// every talker has done a few rounds.
func grpcTalk(t *testing.T, startFirst bool) {
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
	if startFirst {
		for len(nodes) < count {
			start()
		}
	}

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
		if !startFirst {
			start()
		}
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
