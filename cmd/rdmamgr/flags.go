package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/node"
)

// common flags of commands that run a manager or talk to one. registerLog
// and registerManager add the two groups: a command registers only the
// groups it uses, so its help lists only flags it honours.
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
	shmUIDs  uidList        // --shm-allow-uid
	metrics  *actor.Metrics // given to the manager startNode builds
	net      netFlags       // hosts.go: TLS, --advertise, --data-tls, etcd
	pprof    bool           // serve --pprof: /debug/pprof/ on the admin listener
	// dataListen is serve --data-listen ("": next to the actor system).
	dataListen string
	// hostAgent is serve --agent-socket and --agent-routes: run as the
	// host's agent ("": not).
	hostAgent node.HostAgent
	// agent is --agent: the host agent's attach socket ("": none).
	agent string
	// cuda is serve --cuda: the manager loads the CUDA driver at start
	// (node.Config.CUDA.Open) and serves GPU buffers.
	cuda bool
	// hostID is --host-id (node.Config.HostID; "": the kernel's host).
	hostID string
}

// registerLog adds --log-level (default def, as the command uses it) and
// --log-json.
func (c *common) registerLog(fs *flag.FlagSet, def string) {
	c.logLevel = def
	fs.Var((*logLevel)(&c.logLevel), "log-level", "log `level`: debug, info, warn, error or disabled")
	fs.BoolVar(&c.logJSON, "log-json", false, "log JSON instead of console lines")
}

// registerManager adds the flags of a command that runs a manager.
func (c *common) registerManager(fs *flag.FlagSet) {
	fs.StringVar(&c.backend, "backend", "auto", "data planes, chosen per peer: "+node.Backends()+"; status and the log say which each route uses and why")
	c.registerSecret(fs)
	c.rdma = ibverbs.DefaultConfig()
	fs.StringVar(&c.rdma.Device, "rdma-device", "", "RDMA `device` (default: the first with an active port)")
	fs.IntVar(&c.rdma.Port, "rdma-port", 0, "RDMA `port` (default: the first active one)")
	fs.IntVar(&c.rdma.GIDIndex, "rdma-gid-index", -1, "GID `index` (-1: the first RoCE v2 GID with an IPv4 address, else 0)")
	fs.StringVar(&c.chunk, "chunk", "", "TCP: operations larger than this `size` are split and striped over the route's connections (default 1MiB)")
	fs.StringVar(&c.sockbuf, "sockbuf", "", "TCP socket send/receive buffer `size` for data connections (e.g. 4MiB; default: the kernel's autotuning)")
	fs.Var(&c.shmUIDs, "shm-allow-uid", "shm: user `ids` or names (comma separated) whose processes may map this manager's memory, besides its own uid; others get TCP (anyone allowed can read all of its pooled memory)")
	fs.IntVar(&c.conns, "conns", tcp.DefaultConfig().ConnsPerRoute, "TCP connections per route")
	fs.StringVar(&c.agent, "agent", "", "attach to the host agent at this unix socket `path` (rdmamgr serve --agent-socket): routes to processes of other hosts that are attached to theirs go through both agents (one set of connections per pair of hosts); without it, or while the agent is not there (retried every second), routes go direct")
	fs.StringVar(&c.hostID, "host-id", "", "act as the host of this `name` though sharing a kernel with others: shm only between processes of one name, host agents of different names are different hosts, a process attaches only to an agent of its name (test rigs: two agents in one VM; processes sharing a kernel that must act as separate hosts). Default: the kernel's host (boot id and namespaces)")
	c.registerMaxMsg(fs)
	c.net.register(fs)
}

// registerSecret adds --secret-file.
func (c *common) registerSecret(fs *flag.FlagSet) {
	fs.StringVar(&c.secret, "secret-file", "", "`file` holding the deployment's shared secret (≥16 bytes); without TLS every control connection proves it, and routes and data connections always do. It does not replace TLS: without --tls-* a daemon serves loopback only, with or without a secret (and without either, any local process may use it)")
}

func (c *common) registerMaxMsg(fs *flag.FlagSet) {
	c.maxMsg = actor.DefaultConfig().MaxMessageSize
	fs.Var(sizeInt{&c.maxMsg, 1 << 30}, "max-message-size", "largest control message, a `size` (gRPC limit on both sides)")
}

// logLevel is a flag.Value that accepts only zerolog's level names.
type logLevel string

var logLevels = []string{"debug", "info", "warn", "error", "disabled"}

func (l *logLevel) String() string { return string(*l) }

func (l *logLevel) Set(s string) error {
	for _, v := range logLevels {
		if s == v {
			*l = logLevel(s)
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(logLevels, ", "))
}

// Log timestamps: console lines carry the date and milliseconds, JSON
// lines RFC 3339 with sub-second digits (zerolog's default is seconds).
const (
	consoleTime = "2006-01-02 15:04:05.000"
	jsonTime    = "2006-01-02T15:04:05.000000Z07:00"
)

// logger returns a zerolog logger on stderr and a slog view of it for the
// library packages.
func (c *common) logger(stderr io.Writer) (zerolog.Logger, *slog.Logger, error) {
	lvl, err := zerolog.ParseLevel(c.logLevel)
	if err != nil {
		return zerolog.Logger{}, nil, usagef("--log-level %q: want one of %s", c.logLevel, strings.Join(logLevels, ", "))
	}
	var w io.Writer = stderr
	if !c.logJSON {
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: consoleTime, NoColor: true}
	}
	zerolog.TimeFieldFormat = jsonTime // the CLI's own process: set once per command
	// Durations with their unit ("1.5s", "250ms"), not a bare number of
	// milliseconds.
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	// Warnings are sampled as a backstop (100 a second): a flood of bad
	// input must not become a flood of log lines. The refusals themselves
	// are counted in status, and the manager samples its own lines.
	zl := zerolog.New(w).Level(lvl).With().Timestamp().Logger().
		Sample(zerolog.LevelSampler{WarnSampler: &zerolog.BurstSampler{Burst: 100, Period: time.Second}})
	return zl, slog.New(zerolog.NewSlogHandler(zl)), nil
}
