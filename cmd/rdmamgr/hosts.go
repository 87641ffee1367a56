package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/certs"
	"github.com/rdmamgr/rdmamgr/membership"
	"github.com/rdmamgr/rdmamgr/node"
)

// netFlags are the flags of running across hosts: addresses, credentials
// and membership. Their logic is here, apart from the flag wiring.
type netFlags struct {
	advertise              string
	tlsCA, tlsCert, tlsKey string
	dataTLS                bool
	etcd                   string
	cluster                string
	leaseTTL               time.Duration

	creds *certs.Credentials // loaded by load
	// peerMember is the member name --peer was resolved from: the peer's
	// certificate must carry it (apply).
	peerMember string
}

// register adds the network flags of a command that runs a manager:
// registerClient's, --advertise and --data-tls.
func (f *netFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.advertise, "advertise", "", "HOST[:PORT] peers use to reach us (actor system and data listener); default: the bind address, or for a wildcard bind a routable address of this host")
	f.registerClient(fs)
	fs.BoolVar(&f.dataTLS, "data-tls", false, "encrypt data connections too (TLS with the same certificates; costs throughput, see README)")
}

// registerClient adds what a command that only asks a daemon or etcd
// needs: TLS credentials and etcd.
func (f *netFlags) registerClient(fs *flag.FlagSet) {
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA certificate of the deployment (rdmamgr certs); with --tls-cert and --tls-key the control plane runs mutual TLS 1.3")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "this host's certificate")
	fs.StringVar(&f.tlsKey, "tls-key", "", "this host's key")
	fs.StringVar(&f.etcd, "etcd", "", "etcd endpoints (comma-separated host:port) holding the cluster's membership")
	fs.StringVar(&f.cluster, "cluster", "default", "cluster name in etcd")
	f.leaseTTL = membership.DefaultTTL
}

// registerLease adds --lease-ttl (serve: the member's own lease).
func (f *netFlags) registerLease(fs *flag.FlagSet) {
	fs.DurationVar(&f.leaseTTL, "lease-ttl", membership.DefaultTTL, "membership lease: a member that dies leaves within this")
}

// load reads the TLS credentials, if any flag names them.
func (f *netFlags) load() error {
	if f.creds != nil {
		return nil
	}
	if f.tlsCA == "" && f.tlsCert == "" && f.tlsKey == "" {
		if f.dataTLS {
			return usagef("--data-tls needs --tls-ca, --tls-cert and --tls-key")
		}
		return nil
	}
	c, err := certs.Load(f.tlsCA, f.tlsCert, f.tlsKey)
	if err != nil {
		return usagef("%v", err)
	}
	f.creds = c
	return nil
}

// apply sets the node's advertised host and control-plane TLS, and the
// data plane's TLS with --data-tls. A peer found by member name must show
// that member's certificate.
func (f *netFlags) apply(cfg *node.Config) {
	cfg.Advertise = f.advertise
	if f.creds == nil {
		return
	}
	client := f.clientTLS()
	cfg.ServerTLS, cfg.ClientTLS = f.creds.Server, client
	if f.dataTLS {
		cfg.TCP.ServerTLS, cfg.TCP.ClientTLS = f.creds.Server, client
	}
}

// clientTLS is our client TLS configuration: with a --peer given by member
// name, it also requires that member's certificate.
func (f *netFlags) clientTLS() *tls.Config {
	if f.peerMember == "" {
		return f.creds.Client
	}
	return certs.RequireName(f.creds.Client, f.peerMember)
}

// normalizeListen accepts ":PORT", "0.0.0.0:PORT", "[::]:PORT" and
// "HOST:PORT", and returns it in net.JoinHostPort form.
func normalizeListen(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", usagef("--listen %q: want HOST:PORT, :PORT or [::]:PORT", listen)
	}
	return net.JoinHostPort(host, port), nil
}

// replyListen returns the address a client should listen on to hear from
// peer: listen when given, else the local address of the route to peer.
func replyListen(listen, peer string) (string, error) {
	if listen != "" {
		return normalizeListen(listen)
	}
	a, err := actor.ReplyListen(peer)
	if err != nil {
		return "", fmt.Errorf("--peer %s: %w", peer, err)
	}
	return a, nil
}

// openMembership connects to etcd when --etcd is set (nil otherwise).
// With --tls-*, etcd is reached over TLS with this host's certificate (run
// etcd with --client-cert-auth and the deployment CA), our records are
// signed with its key and records that do not verify are ignored.
func (f *netFlags) openMembership(log *slog.Logger) (*membership.Registry, error) {
	if f.etcd == "" {
		return nil, nil
	}
	if err := f.load(); err != nil {
		return nil, err
	}
	cfg := membership.Config{
		Endpoints: strings.Split(f.etcd, ","),
		Cluster:   f.cluster,
		TTL:       f.leaseTTL,
		Logger:    log,
	}
	if f.creds != nil {
		cfg.TLS = f.creds.Client.Clone()
		cfg.Identity, cfg.Roots = &f.creds.Pair, f.creds.Pool
	}
	reg, err := membership.Open(cfg)
	if err != nil && f.creds != nil {
		return nil, fmt.Errorf("%w (with --tls-*, etcd is reached over TLS with this host's certificate: run it with --client-cert-auth, --trusted-ca-file CA, --cert-file, --key-file)", err)
	}
	return reg, err
}

// resolvePeer turns --peer into an actor-system address: HOST:PORT as is,
// anything else is a member name looked up in etcd (it needs --etcd). It
// returns the manager's actor name too ("" to keep the default).
func (f *netFlags) resolvePeer(ctx context.Context, peer string, log *slog.Logger) (addr, name string, err error) {
	if _, _, err := splitHostPort(peer); err == nil {
		return peer, "", nil
	}
	if f.etcd == "" {
		return "", "", usagef("--peer %q: want HOST:PORT, or a member name with --etcd", peer)
	}
	reg, err := f.openMembership(log)
	if err != nil {
		return "", "", err
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := reg.Lookup(ctx, peer)
	if err != nil {
		return "", "", err
	}
	f.peerMember = peer
	return m.Address, m.Manager, nil
}

// peerAndListen resolves --peer (address or member name) to the manager's
// PID and picks the address to listen on for its replies.
func (f *netFlags) peerAndListen(ctx context.Context, peer, peerName, listen string, log *slog.Logger) (*protoactor.PID, string, error) {
	addr, name, err := f.resolvePeer(ctx, peer, log)
	if err != nil {
		return nil, "", err
	}
	if name != "" && peerName == actor.DefaultName {
		peerName = name
	}
	pid, err := peerPID(addr, peerName)
	if err != nil {
		return nil, "", err
	}
	lis, err := replyListen(listen, addr)
	if err != nil {
		return nil, "", err
	}
	return pid, lis, nil
}
