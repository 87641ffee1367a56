package node

import (
	"context"
	"errors"
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
	t.Skip("known data race (issue 22): node.Start calls protoactor's remote.Start, " +
		"which writes grpc's global logger while other nodes' and the program's own gRPC " +
		"goroutines read it; fixed only by one remote per process or a transport of our own (node/doc.go)")
	if !isolated(t) {
		return
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()

	// The first node, then the program's own gRPC server and client.
	a := startNode(t, Config{Backend: backend.KindTCP})
	target := healthServer(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	talk := func(what string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := f(); err != nil && ctx.Err() == nil {
					t.Errorf("%s: %v", what, err)
					return
				}
			}
		}()
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	talk("health check", func() error {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
	// A client connection per call: connection state changes are what
	// grpc logs (channelz) most.
	talk("health check on a new connection", func() error {
		c, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})

	// A second node talks with the first; then more nodes start while
	// they all talk, and each joins in.
	nodes := []*Node{a}
	for range 3 {
		n := startNode(t, Config{Backend: backend.KindTCP})
		peer := nodes[len(nodes)-1]
		talk("ping "+peer.Addr(), func() error {
			_, err := n.ClientOf(peer.Addr(), "").Ping(ctx)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		})
		if _, err := peer.ClientOf(n.Addr(), "").Ping(ctx); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	cancel()
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
