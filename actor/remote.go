package actor

import (
	"fmt"
	"net"
	"strconv"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
)

// DefaultMaxMessageSize bounds control messages on the gRPC transport.
const DefaultMaxMessageSize = 4 << 20

// StartRemote starts protoactor remote for sys on addr ("host:port"; port 0
// picks one) with gRPC message limits set on both sides, so an oversize
// message is an error rather than a dropped connection, and with a guard
// that keeps peers from crashing the process or stopping its actors
// (remote_guard.go). It returns the remote and the address peers use.
// Unlike remote.Start it returns an error when it cannot listen.
func StartRemote(sys *protoactor.ActorSystem, addr string, maxMsg int) (r *remote.Remote, advertised string, err error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", fmt.Errorf("remote address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port < 0 || port > 65535 {
		return nil, "", fmt.Errorf("remote port %q: bad port", portS)
	}
	if maxMsg <= 0 {
		maxMsg = DefaultMaxMessageSize
	}
	// Slack for protoactor's envelope around our messages.
	limit := maxMsg + 64<<10
	guard := &remoteGuard{sys: sys}
	cfg := remote.Configure(host, port,
		remote.WithServerOptions(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(limit), grpc.MaxSendMsgSize(limit)},
			guard.serverOptions()...)...),
		remote.WithDialOptions(grpc.WithInsecure(),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit))),
	)
	r = remote.NewRemote(sys, cfg)
	defer func() {
		if p := recover(); p != nil {
			r, advertised, err = nil, "", fmt.Errorf("start remote on %s: %v", addr, p)
		}
	}()
	r.Start()
	return r, sys.Address(), nil
}
