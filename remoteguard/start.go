package remoteguard

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/internal/control"
)

// endpointBatch is how many envelopes an endpoint puts in one gRPC message;
// with the message limit it bounds what one batch may carry.
const endpointBatch = 64

// Start serves the control plane of sys on addr ("host:port"; port 0
// picks one) with our transport of protoactor's Remoting protocol
// (transport.go) on a hardened gRPC server (cfg, config.go), with message
// limits set on both sides so an oversize message is an error rather than a
// dropped connection, and with the guard (guard.go, sender.go). It returns
// the transport and the address peers use, or an error when it cannot
// listen. Options add mutual TLS and the advertised host; a wildcard bind
// advertises a routable address of this host, never the wildcard. Stop
// ends it.
func Start(sys *protoactor.ActorSystem, addr string, cfg Config, opts ...Option) (r *Remote, advertised string, err error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", fmt.Errorf("remote address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port < 0 || port > 65535 {
		return nil, "", fmt.Errorf("remote port %q: bad port", portS)
	}
	cfg.MaxMessageSize = max(cfg.MaxMessageSize, 0)
	cfg = cfg.withDefaults()
	book := control.BookOf(sys)
	g := &guard{sys: sys, book: book, streams: make(chan struct{}, cfg.MaxStreams)}
	o := newOptions(opts)
	host, port, adv, err := o.resolve(host, port)
	if err != nil {
		return nil, "", err
	}
	r = newRemote(sys,
		append(cfg.serverOptions(book, o.serverCredentials(book)), g.serverOptions()...),
		cfg.dialOptions(o.dialCredentials(), streamsOf(sys)),
		endpointBatch)
	advertised, err = r.serve(net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port)), adv)
	if err != nil {
		r.stop()
		streamSets.Delete(sys) // stop.go
		return nil, "", err
	}
	return r, advertised, nil
}

// resolve returns the bind host and port for protoactor's Configure (IPv6
// in brackets) and the address to advertise ("" when it is the listener's
// own). A wildcard bind without an advertised host advertises a routable
// address of this host, picked from the interfaces and logged. When the
// advertised host differs from the bind host and the port is 0, a free port
// is picked first, as protoactor needs the full advertised address before
// it listens.
func (o *options) resolve(host string, port int) (bindHost string, bindPort int, adv string, err error) {
	advHost, picked, err := AdvertiseHost(host, o.advertise)
	if err != nil {
		return "", 0, "", err
	}
	if picked && o.log != nil {
		_, ifName, _ := RoutableHost()
		o.log.Info("wildcard bind: advertising a routable address of this host", "advertise", advHost, "interface", ifName)
	}
	bindHost = host
	if strings.Contains(host, ":") {
		bindHost = "[" + host + "]"
	}
	advPort := port
	if o.advertise != "" {
		if _, p, err := net.SplitHostPort(o.advertise); err == nil {
			if advPort, err = strconv.Atoi(p); err != nil {
				return "", 0, "", fmt.Errorf("advertise %q: bad port", o.advertise)
			}
		}
	}
	if advHost == host && advPort == port {
		return bindHost, port, "", nil
	}
	if port == 0 {
		if port, err = freePort(bindHost); err != nil {
			return "", 0, "", err
		}
		if advPort == 0 {
			advPort = port
		}
	}
	return bindHost, port, net.JoinHostPort(advHost, strconv.Itoa(advPort)), nil
}

// freePort returns a port that was free on host a moment ago.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		return 0, fmt.Errorf("pick a port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Option configures Start beyond its address and limits.
type Option func(*options)

type options struct {
	tlsOptions
	advertise string
	log       *slog.Logger
}

func newOptions(opts []Option) *options {
	o := &options{}
	for _, f := range opts {
		f(o)
	}
	return o
}

// WithAdvertise sets the host (or host:port) peers use to reach us; with
// no port, the listener's port. Peers check that our messages' sender
// host is the IP their connection from us comes from (sender.go), so
// advertise the address this host sends from toward its peers.
func WithAdvertise(host string) Option {
	return func(o *options) { o.advertise = host }
}

// WithLogger receives Start's own log lines (which address a wildcard
// bind advertises).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.log = l }
}
