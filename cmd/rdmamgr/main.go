package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
)

const usage = `rdmamgr: an RDMA resource manager

usage:
  rdmamgr serve   --listen HOST:PORT [flags]     run a manager daemon
  rdmamgr demo    [flags]                        two managers move bytes both ways and verify them
  rdmamgr bench   --peer ADDR --op put|get --size SIZE --count N [--concurrency C] [--verify]
  rdmamgr bench   --baseline [--sizes LIST] [--ops put,get] [--placement any|same|split] [--json FILE]
                                                 ours against plain Go TCP, in one run, with ratios
  rdmamgr status  --peer ADDR                    show a manager's buffers, routes and counters
  rdmamgr devices                                list RDMA devices
  rdmamgr certs   --dir D --host NAME=ADDR ...   make a deployment CA and host certificates
  rdmamgr members --etcd HOST:PORT [--cluster C] list a cluster's members

Across hosts: --tls-ca/--tls-cert/--tls-key (mutual TLS; without them a
manager binds loopback only), --advertise HOST, --data-tls, and
--etcd/--cluster with 'serve --member NAME' and '--peer NAME'.

Run 'rdmamgr CMD -h' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		err = cmdServe(ctx, args[1:], stdout, stderr)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout, stderr)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout, stderr)
	case "status":
		err = cmdStatus(ctx, args[1:], stdout, stderr)
	case "devices":
		err = cmdDevices(ctx, args[1:], stdout, stderr)
	case "certs":
		err = cmdCerts(args[1:], stdout, stderr)
	case "members":
		err = cmdMembers(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "rdmamgr: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "rdmamgr %s: %v\n", args[0], err)
			return 2
		}
		fmt.Fprintf(stderr, "rdmamgr %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// common flags of commands that run a manager or talk to one.
type common struct {
	logLevel string
	logJSON  bool
	conns    int
	maxMsg   int
	backend  string
	secret   string
	sockbuf  string
	chunk    string
	limits   limitFlags
	rdma     ibverbs.Config
	net      netFlags // hosts.go
}

// limitFlags bound what a manager holds. Their defaults are the library's
// (actor/limits.go, actor/remote_server.go), computed for this machine and
// printed by -h.
type limitFlags struct {
	maxRegistered     string
	maxRegion         string
	maxRegions        int
	maxRemote         string
	maxRemotePerPeer  int
	remoteLease       time.Duration
	maxRoutes         int
	handshakesPerPeer int
	remote            actor.RemoteConfig
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	d := actor.DefaultLimits()
	fs.StringVar(&l.maxRegistered, "max-registered", fmtSize(d.MaxBytes),
		fmt.Sprintf("most bytes the manager registers in all (%d%% of physical memory)", actor.DefaultRegisteredShare))
	fs.StringVar(&l.maxRegion, "max-region", fmtSize(d.MaxRegion), "largest single buffer (a quarter of physical memory)")
	fs.IntVar(&l.maxRegions, "max-regions", d.MaxRegions, "most registered regions (16384, or a quarter of vm.max_map_count if lower)")
	fs.StringVar(&l.maxRemote, "max-remote", fmtSize(actor.DefaultMaxRemoteBytes()),
		"most bytes remote peers may hold through request_buffer at once (a quarter of physical memory)")
	fs.IntVar(&l.maxRemotePerPeer, "max-remote-buffers", actor.DefaultMaxRemoteBuffersPerPeer, "most buffers one remote peer may hold")
	fs.DurationVar(&l.remoteLease, "remote-lease", actor.DefaultRemoteLease, "lease given to buffers remote peers request without one (0: none)")
	fs.IntVar(&l.maxRoutes, "max-routes", actor.DefaultMaxRoutes, "most routes to peers")
	fs.IntVar(&l.handshakesPerPeer, "handshakes-per-peer", actor.DefaultHandshakesPerPeer, "most route handshakes accepted from one peer per 30 s")
	r := actor.DefaultRemoteConfig()
	fs.IntVar(&l.remote.MaxConns, "grpc-max-conns", r.MaxConns, "most control (gRPC) connections served at once")
	fs.IntVar(&l.remote.MaxConnsPerIP, "grpc-max-conns-per-ip", r.MaxConnsPerIP, "most control connections from one address")
	fs.IntVar(&l.remote.MaxStreams, "grpc-max-streams", r.MaxStreams, "most control streams served at once (a peer uses one)")
	fs.DurationVar(&l.remote.HandshakeTimeout, "grpc-handshake-timeout", r.HandshakeTimeout, "time a new control connection has to finish its HTTP/2 handshake")
}

func (l *limitFlags) apply(cfg *actor.Config) error {
	for _, f := range []struct {
		name, v string
		dst     *uint64
	}{{"max-registered", l.maxRegistered, &cfg.Limits.MaxBytes}, {"max-region", l.maxRegion, &cfg.Limits.MaxRegion},
		{"max-remote", l.maxRemote, &cfg.MaxRemoteBytes}} {
		if f.v == "" {
			continue
		}
		n, err := parseSize(f.v)
		if err != nil {
			return usagef("--%s: %v", f.name, err)
		}
		*f.dst = n
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max-regions", l.maxRegions}, {"max-remote-buffers", l.maxRemotePerPeer}, {"max-routes", l.maxRoutes},
		{"handshakes-per-peer", l.handshakesPerPeer}} {
		if f.v < 0 {
			return usagef("--%s %d: want a positive number", f.name, f.v)
		}
	}
	cfg.Limits.MaxRegions = l.maxRegions
	cfg.MaxRemoteBuffersPerPeer = l.maxRemotePerPeer
	cfg.RemoteLease = l.remoteLease
	if l.remoteLease == 0 {
		cfg.RemoteLease = -1 // asked for none
	}
	cfg.MaxRoutes = l.maxRoutes
	cfg.HandshakesPerPeer = l.handshakesPerPeer
	return nil
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error, disabled")
	fs.BoolVar(&c.logJSON, "log-json", false, "log JSON instead of console lines")
	fs.StringVar(&c.backend, "backend", "auto", "data plane: auto (ibverbs where a usable device exists, else tcp), ibverbs or tcp")
	fs.StringVar(&c.secret, "secret-file", "", "file holding the deployment's shared secret (≥16 bytes); routes and data connections prove it. Without it, managers bind to loopback only")
	c.rdma = ibverbs.DefaultConfig()
	fs.StringVar(&c.rdma.Device, "rdma-device", "", "RDMA device (default: the first with an active port)")
	fs.IntVar(&c.rdma.Port, "rdma-port", 0, "RDMA port (default: the first active one)")
	fs.IntVar(&c.rdma.GIDIndex, "rdma-gid-index", -1, "GID index (-1: the first RoCE v2 GID with an IPv4 address, else 0)")
	fs.StringVar(&c.chunk, "chunk", "", "TCP: operations larger than this are split and striped over the route's connections (default 1MiB)")
	fs.StringVar(&c.sockbuf, "sockbuf", "", "TCP socket send/receive buffer size for data connections (e.g. 4MiB; default: the kernel's autotuning)")
	fs.IntVar(&c.conns, "conns", tcp.DefaultConfig().ConnsPerRoute, "TCP connections per route")
	fs.IntVar(&c.maxMsg, "max-message-size", actor.DefaultMaxMessageSize, "largest control message in bytes (gRPC limit on both sides)")
	c.net.register(fs)
}

// logger returns a zerolog logger on stderr and a slog view of it for the
// library packages.
func (c *common) logger(stderr io.Writer) (zerolog.Logger, *slog.Logger, error) {
	lvl, err := zerolog.ParseLevel(c.logLevel)
	if err != nil {
		return zerolog.Logger{}, nil, usagef("--log-level %q: %v", c.logLevel, err)
	}
	var w io.Writer = stderr
	if !c.logJSON {
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly, NoColor: true}
	}
	// Warnings are sampled as a backstop (100 a second): a flood of bad
	// input must not become a flood of log lines. The refusals themselves
	// are counted in status, and the manager samples its own lines.
	zl := zerolog.New(w).Level(lvl).With().Timestamp().Logger().
		Sample(zerolog.LevelSampler{WarnSampler: &zerolog.BurstSampler{Burst: 100, Period: time.Second}})
	return zl, slog.New(zerolog.NewSlogHandler(zl)), nil
}

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

// parseSize parses "4096", "4KiB", "1MiB", "16m", "1GiB".
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	mult := uint64(1)
	for _, suf := range []struct {
		s string
		m uint64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1}} {
		if strings.HasSuffix(t, suf.s) {
			t, mult = strings.TrimSuffix(t, suf.s), suf.m
			break
		}
	}
	v, err := strconv.ParseUint(strings.TrimSpace(t), 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, optionally with KiB, MiB or GiB", s)
	}
	if v > (1<<40)/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return v * mult, nil
}

func fmtSize(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
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
