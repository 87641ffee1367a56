package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/node"
)

// startNode starts a node (package node) on listen from the command's
// flags: with a manager named name when withManager is set, else only the
// actor system and remote (a client).
func startNode(ctx context.Context, listen string, c *common, slogger *slog.Logger, name string, withManager bool) (*node.Node, error) {
	cfg, err := c.nodeConfig(listen, slogger, name, withManager)
	if err != nil {
		return nil, err
	}
	return node.Start(ctx, cfg)
}

// nodeConfig turns the flags into a node.Config.
func (c *common) nodeConfig(listen string, slogger *slog.Logger, name string, withManager bool) (node.Config, error) {
	var secret backend.Secret
	if c.secret != "" {
		s, err := backend.LoadSecret(c.secret)
		if err != nil {
			return node.Config{}, usagef("%v", err)
		}
		secret = s
	}
	if err := c.net.load(); err != nil {
		return node.Config{}, err
	}
	if withManager {
		warnReadable(slogger, "--secret-file", c.secret)
		warnReadable(slogger, "--tls-key", c.net.tlsKey)
	}
	if c.net.creds == nil && withManager {
		listen = loopbackOnly(listen, &c.net, slogger)
	}
	cfg := node.Config{Listen: listen, Secret: secret, Remote: c.limits.remote, NoManager: !withManager, Logger: slogger}
	cfg.Remote.MaxMessageSize = c.maxMsg
	c.net.apply(&cfg)
	if c.logLevel == "debug" {
		// protoactor logs routine connection churn at error level; pass
		// its logs through only at --log-level debug.
		cfg.ProtoactorLogger = slogger.With("component", "protoactor")
	}
	if !withManager {
		return cfg, nil
	}
	k, err := node.ParseBackend(c.backend)
	if err != nil {
		return node.Config{}, usagef("--backend: %v", err)
	}
	cfg.Backend, cfg.IBVerbs = k, c.rdma
	cfg.SHM.AllowUIDs = c.shmUIDs
	cfg.Agent = c.agent
	cfg.CUDA.Open = c.cuda
	cfg.HostID = c.hostID
	if err := c.tcpConfig(&cfg.TCP); err != nil {
		return node.Config{}, err
	}
	cfg.TCP.ListenAddr = c.dataListen
	if c.hostAgent.Socket != "" {
		cfg.HostAgent = c.hostAgent
		cfg.HostAgent.AllowUIDs = c.shmUIDs
	}
	cfg.Manager = actor.Config{Name: name, Secret: secret, MaxMessageSize: c.maxMsg, Logger: slogger, Metrics: c.metrics}
	if err := c.limits.apply(&cfg.Manager); err != nil {
		return node.Config{}, err
	}
	return cfg, nil
}

// tcpConfig applies the TCP flags (--conns, --chunk, --sockbuf) to cfg;
// node places the data listener next to the actor system.
func (c *common) tcpConfig(cfg *tcp.Config) error {
	cfg.ConnsPerRoute = c.conns
	maxFrame := tcp.DefaultConfig().MaxFrameLen
	if c.chunk != "" {
		sz, err := parseSize(c.chunk)
		if err != nil || sz > uint64(maxFrame) {
			return usagef("--chunk %q: want a size up to %d bytes", c.chunk, maxFrame)
		}
		cfg.ChunkSize = int(sz)
	}
	if c.sockbuf != "" {
		sz, err := parseSize(c.sockbuf)
		if err != nil || sz > 1<<30 {
			return usagef("--sockbuf %q: want a size up to 1GiB", c.sockbuf)
		}
		cfg.SocketBuffer = int(sz)
	}
	return nil
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
	if isLoopbackHost(host) && nf.advertise == "" {
		return listen
	}
	log.Warn("no --tls-ca/--tls-cert/--tls-key: binding to loopback only; make credentials with 'rdmamgr certs' to serve other hosts", "asked", listen, "advertise", nf.advertise)
	nf.advertise = ""
	return net.JoinHostPort("127.0.0.1", port)
}

// warnReadable warns when file (a secret or a private key) is readable by
// its group or others: anyone who reads it joins the deployment.
func warnReadable(log *slog.Logger, flagName, file string) {
	if file == "" {
		return
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm()&0o077 == 0 {
		return
	}
	log.Warn(flagName+" file is readable by group or others; chmod 600 it", "file", file, "mode", fmt.Sprintf("%#o", st.Mode().Perm()))
}

// isLoopbackHost reports whether host (of HOST:PORT, maybe bracketed) is a
// loopback address or "localhost".
func isLoopbackHost(host string) bool {
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return (ip != nil && ip.IsLoopback()) || host == "localhost"
}

// checkServeReach refuses a daemon asked to serve other hosts without TLS
// credentials: it could only bind loopback, and a unit that reports ready
// yet no other host can reach is worse than one that does not start.
func checkServeReach(flagName, listen string, nf *netFlags) error {
	if nf.tlsCA != "" || nf.tlsCert != "" || nf.tlsKey != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil // normalizeListen said so already
	}
	if !isLoopbackHost(host) {
		return refusef("--%s %s serves other hosts, which needs --tls-ca, --tls-cert and --tls-key (make them with 'rdmamgr certs'); without them listen on loopback (127.0.0.1:PORT)", flagName, listen)
	}
	if nf.advertise != "" {
		return refusef("--advertise %s needs --tls-ca, --tls-cert and --tls-key (make them with 'rdmamgr certs'); without them a daemon serves this host only", nf.advertise)
	}
	return nil
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
func closeWithin(n *node.Node, d time.Duration) {
	done := make(chan struct{})
	go func() { defer close(done); n.Close() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
