package actor

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
)

// DefaultMaxMessageSize bounds control messages on the gRPC transport. The
// largest real one is a status reply (at most maxStatusBuffers buffers
// listed, a few tens of KiB); requests are a few hundred bytes.
const DefaultMaxMessageSize = 1 << 20

// endpointBatch is how many envelopes protoactor puts in one gRPC message;
// with the message limit it bounds what one batch may carry.
const endpointBatch = 64

// StartRemote is StartRemoteConfig with the default RemoteConfig and the
// given message limit (0: DefaultMaxMessageSize).
func StartRemote(sys *protoactor.ActorSystem, addr string, maxMsg int, opts ...RemoteOption) (r *remote.Remote, advertised string, err error) {
	return StartRemoteConfig(sys, addr, RemoteConfig{MaxMessageSize: maxMsg}, opts...)
}

// StartRemoteConfig starts protoactor remote for sys on addr ("host:port";
// port 0 picks one) on a hardened gRPC server (cfg, remote_server.go),
// with message limits set on both sides so an oversize message is an error
// rather than a dropped connection, and with a guard that keeps peers from
// crashing the process, stopping its actors or passing for local
// (remote_guard.go, remote_origin.go). It returns the remote and the
// address peers use. Unlike remote.Start it returns an error when it
// cannot listen. Options add mutual TLS and the advertised host
// (remote_opts.go, advertise.go); a wildcard bind advertises a routable
// address of this host, never the wildcard.
func StartRemoteConfig(sys *protoactor.ActorSystem, addr string, cfg RemoteConfig, opts ...RemoteOption) (r *remote.Remote, advertised string, err error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", fmt.Errorf("remote address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port < 0 || port > 65535 {
		return nil, "", fmt.Errorf("remote port %q: bad port", portS)
	}
	if cfg.MaxMessageSize < 0 {
		cfg.MaxMessageSize = 0
	}
	cfg = cfg.withDefaults()
	book := refusalsOf(sys)
	guard := &remoteGuard{sys: sys, book: book, streams: make(chan struct{}, cfg.MaxStreams)}
	o := newRemoteOpts(opts)
	host, port, adv, err := o.resolve(host, port)
	if err != nil {
		return nil, "", err
	}
	rc := remote.Configure(host, port, remote.WithAdvertisedHost(adv), remote.WithEndpointWriterQueueSize(endpointQueueInitial),
		remote.WithServerOptions(append(cfg.serverOptions(book, o.serverCredentials(book)), guard.serverOptions()...)...),
		remote.WithDialOptions(cfg.dialOptions(o.dialCredentials())...),
		remote.WithEndpointWriterBatchSize(endpointBatch),
	)
	r = remote.NewRemote(sys, rc)
	defer func() {
		if p := recover(); p != nil {
			r, advertised, err = nil, "", fmt.Errorf("start remote on %s: %v", addr, p)
		}
	}()
	r.Start()
	return r, sys.Address(), nil
}

// remotingReceive is the method of protoactor's endpoint writer stream.
var remotingReceive = remotingPrefix + "Receive"

// closeConnWithStream closes the gRPC client connection of a Remoting
// stream that failed to open or ended. protoactor's endpoint writer dials a
// new grpc.ClientConn for every connection attempt and drops the one of an
// attempt that failed without closing it (remote/endpoint_writer.go,
// initialize and initializeInternal): each message sent to a peer that is
// down (a restarting daemon) leaked a ClientConn that kept reconnecting to
// the peer's address for the life of the process, with its goroutines and,
// once the peer was back, an idle socket. The writer never uses a
// connection again after its stream failed (it stops, or retries with a new
// one), so closing it here is safe; its own later Close of the same
// connection only returns an error it logs.
func closeConnWithStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if method != remotingReceive {
		return s, err
	}
	if err != nil {
		cc.Close()
		return nil, err
	}
	return &closingStream{ClientStream: s, cc: cc}, nil
}

// closingStream closes its connection once a send or receive fails.
type closingStream struct {
	grpc.ClientStream
	cc   *grpc.ClientConn
	once sync.Once
}

func (s *closingStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil {
		s.close()
	}
	return err
}

func (s *closingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.close()
	}
	return err
}

func (s *closingStream) close() { s.once.Do(func() { s.cc.Close() }) }
