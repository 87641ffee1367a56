package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
)

// node is an actor system with remote and, optionally, a manager.
type node struct {
	sys    *protoactor.ActorSystem
	remote *remote.Remote
	addr   string
	mgr    *actor.Manager
}

// startNode starts an actor system with remote on listen, and a manager
// when withManager is set.
func startNode(ctx context.Context, listen string, c *common, slogger *slog.Logger, name string, withManager bool) (*node, error) {
	// protoactor logs routine connection churn at error level; pass its
	// logs through only at --log-level debug.
	var secret backend.Secret
	if c.secret != "" {
		s, err := backend.LoadSecret(c.secret)
		if err != nil {
			return nil, usagef("%v", err)
		}
		secret = s
	}
	if err := c.net.load(); err != nil {
		return nil, err
	}
	if c.net.creds == nil && withManager {
		listen = loopbackOnly(listen, &c.net, slogger)
	}
	var plog *slog.Logger
	if c.logLevel == "debug" {
		plog = slogger.With("component", "protoactor")
	}
	sys := actor.NewActorSystem(plog)
	rcfg := c.limits.remote
	rcfg.MaxMessageSize = c.maxMsg
	r, addr, err := actor.StartRemoteConfig(sys, listen, rcfg, c.net.remoteOptions(slogger)...)
	if err != nil {
		sys.Shutdown()
		return nil, err
	}
	n := &node{sys: sys, remote: r, addr: addr}
	if !withManager {
		return n, nil
	}
	switch c.backend {
	case "auto", "tcp", "ibverbs":
	default:
		n.close()
		return nil, usagef("--backend %q: want auto, ibverbs or tcp", c.backend)
	}
	tcfg := tcp.DefaultConfig()
	c.net.applyTCP(&tcfg, listen, addr)
	tcfg.ConnsPerRoute = c.conns
	if c.chunk != "" {
		sz, err := parseSize(c.chunk)
		if err != nil || sz > uint64(tcfg.MaxFrameLen) {
			n.close()
			return nil, usagef("--chunk %q: want a size up to %d bytes", c.chunk, tcfg.MaxFrameLen)
		}
		tcfg.ChunkSize = int(sz)
	}
	if c.sockbuf != "" {
		sz, err := parseSize(c.sockbuf)
		if err != nil || sz > 1<<30 {
			n.close()
			return nil, usagef("--sockbuf %q: want a size up to 1GiB", c.sockbuf)
		}
		tcfg.SocketBuffer = int(sz)
	}
	mcfg := actor.Config{
		Name:           name,
		Backend:        backend.Kind(c.backend),
		TCP:            tcfg,
		IBVerbs:        c.rdma,
		Secret:         secret,
		MaxMessageSize: c.maxMsg,
		Logger:         slogger,
		Metrics:        c.metrics,
	}
	if err := c.limits.apply(&mcfg); err != nil {
		n.close()
		return nil, err
	}
	m, err := actor.New(sys, mcfg)
	if err != nil {
		n.close()
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		n.close()
		return nil, err
	}
	n.mgr = m
	return n, nil
}

// loopbackOnly rewrites a non-loopback listen address to 127.0.0.1 (and
// drops --advertise): without TLS credentials control messages, handles and
// their keys would cross the network in clear text, so only this host may
// reach us.
func loopbackOnly(listen string, nf *netFlags, log *slog.Logger) string {
	host, port, err := splitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); ((ip != nil && ip.IsLoopback()) || host == "localhost") && nf.advertise == "" {
		return listen
	}
	log.Warn("no --tls-ca/--tls-cert/--tls-key: binding to loopback only; make credentials with 'rdmamgr certs' to serve other hosts", "asked", listen, "advertise", nf.advertise)
	nf.advertise = ""
	return net.JoinHostPort("127.0.0.1", port)
}

func (n *node) close() {
	if n.mgr != nil {
		n.mgr.Close()
	}
	n.remote.Shutdown(true)
	n.sys.Shutdown()
}

func peerPID(addr, name string) (*protoactor.PID, error) {
	if _, _, err := splitHostPort(addr); err != nil {
		return nil, usagef("--peer %q: want HOST:PORT", addr)
	}
	return protoactor.NewPID(addr, name), nil
}

func splitHostPort(a string) (string, string, error) {
	i := strings.LastIndex(a, ":")
	if i <= 0 || i == len(a)-1 {
		return "", "", errors.New("bad address")
	}
	if _, err := strconv.Atoi(a[i+1:]); err != nil {
		return "", "", err
	}
	return a[:i], a[i+1:], nil
}

// closeWithin closes n, waiting at most d: a command that only asked a
// question does not wait for protoactor to give up on an unreachable peer.
func (n *node) closeWithin(d time.Duration) {
	done := make(chan struct{})
	go func() { defer close(done); n.close() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
