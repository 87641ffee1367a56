package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/rdmamgr/rdmamgr/actor"
)

func serveCommand() *command {
	return &command{
		name:     "serve",
		synopsis: "[--listen HOST:PORT] [flags]",
		short:    "run a manager daemon",
		long: `Runs a manager daemon: the manager actor on --listen, its data listener on the
same host (a free port, or --data-listen), and an admin listener with /metrics
(Prometheus), /healthz, /readyz and, with --pprof, /debug/pprof/ on 127.0.0.1
at the --listen port + 1 (a free port when that one is taken or --listen's
port is 0; the "serving" line names it; --metrics-listen sets it, an address
beyond loopback is warned about on stderr). Prints "ready ADDR" on stdout once
peers can reach it and, under systemd Type=notify, sends READY=1. SIGINT or
SIGTERM stops it (exit 0). A --listen other than loopback needs --tls-ca,
--tls-cert and --tls-key: without them serve refuses to start (exit 2).`,
		interruptOK: true,
		setup:       serveFlags,
	}
}

func serveFlags(fs *flag.FlagSet) runFunc {
	listen := fs.String("listen", "127.0.0.1:8090", "actor-system address `HOST:PORT`, :PORT or [::]:PORT (port 0 picks one); the data listener binds the same host")
	member := fs.String("member", "", "with --etcd: our member `name` in the cluster (default: the name --tls-cert carries, which it must then be; else the host name)")
	name := fs.String("name", actor.DefaultName, "manager actor `name`")
	metricsListen := fs.String("metrics-listen", autoMetricsListen, "admin listener `HOST:PORT` for /metrics, /healthz, /readyz (\"\" or off: none; auto: 127.0.0.1 at the --listen port + 1, or a free port; beyond loopback: warned)")
	pprofOn := fs.Bool("pprof", false, "also serve /debug/pprof/ (command line, goroutines, heap, profiles) on the admin listener")
	dataListen := fs.String("data-listen", "", "data listener `HOST:PORT` (TCP backend; default: the --listen host, a free port); a wildcard host is advertised as --listen's")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the daemon's life to this `file`")
	var c common
	fs.BoolVar(&c.cuda, "cuda", false, "serve GPU buffers (RequestBuffer in a CUDA device's memory) through the CUDA driver, libcuda.so.1, loaded at start: without one serve refuses to start (exit 1); without --cuda GPU buffers are refused with ErrNotSupported")
	fs.StringVar(&c.hostAgent.Socket, "agent-socket", "", "run as this host's agent: processes attach on this unix socket `path` (mode 0660) and reach other hosts' processes through it, over ibverbs where both agents have a device (--backend auto or ibverbs), else TCP; users: ours and --shm-allow-uid")
	fs.IntVar(&c.hostAgent.Routes, "agent-routes", 4, "with --agent-socket: TCP connections, or ibverbs queue pairs, between two agents' hosts, both ways (at least 2: half from each agent; on TCP one route of that many connections, overrides --conns; on ibverbs that many routes)")
	c.registerLog(fs, "info")
	c.registerManager(fs)
	c.net.registerLease(fs)
	c.limits.register(fs)
	return func(ctx context.Context, e *env) error {
		var err error
		if *listen, err = normalizeListen(*listen); err != nil {
			return err
		}
		if err := checkServeReach("listen", *listen, &c.net); err != nil {
			return err
		}
		if *dataListen != "" {
			if _, _, err := net.SplitHostPort(*dataListen); err != nil {
				return usagef("--data-listen %q: want HOST:PORT or :PORT", *dataListen)
			}
			if err := checkServeReach("data-listen", *dataListen, &c.net); err != nil {
				return err
			}
			c.dataListen = *dataListen
		}
		if err := checkCUDA(c.cuda); err != nil {
			return err
		}
		if *metricsListen == "off" {
			*metricsListen = ""
		}
		if *metricsListen != "" && *metricsListen != autoMetricsListen {
			if _, _, err := splitHostPort(*metricsListen); err != nil {
				return usagef("--metrics-listen %q: want HOST:PORT, or \"\" for none", *metricsListen)
			}
		}
		c.pprof = *pprofOn
		if c.hostAgent.Routes < 2 {
			return usagef("--agent-routes %d: want at least 2 (one connection each way)", c.hostAgent.Routes)
		}
		return serve(ctx, e, &c, *listen, *name, *member, *metricsListen, *cpuProfile)
	}
}

func serve(ctx context.Context, e *env, c *common, listen, name, member, metricsListen, cpuProfile string) error {
	zl, sl, err := c.logger(e.stderr)
	if err != nil {
		return err
	}
	stopProfiles, err := startProfiles(cpuProfile, "")
	if err != nil {
		return err
	}
	defer stopProfiles()
	c.metrics = actor.NewMetrics()
	n, err := startNode(ctx, listen, c, sl, name, true)
	if err != nil {
		return err
	}
	defer n.Close()
	if c.secret == "" && c.net.creds == nil {
		sl.Warn("no --secret-file and no --tls-*: the control plane is open: any local process may use this daemon (take buffers, queue pairs, status)")
	}
	leave, err := c.net.joinCluster(ctx, n, member, sl)
	if err != nil {
		return err
	}
	defer leave() // before the manager closes
	admin := "off"
	if metricsListen != "" {
		a := newAdminServer(n.Manager(), metricsRegistry(n, c.metrics))
		if c.pprof {
			a.servePprof()
		}
		if err := listenAdmin(a, metricsListen, listen, zl); err != nil {
			return err
		}
		asked := metricsListen
		if asked == autoMetricsListen {
			asked = a.Addr() // loopback
		}
		warnAdminExposure(e.stderr, &zl, asked, a.Addr(), c.pprof)
		defer a.close() // first: /readyz fails before the manager closes
		admin = "http://" + a.Addr() + "/metrics"
	}
	zl.Info().Str("addr", n.Addr()).Str("name", name).Str("data", n.DataAddr()).
		Str("backend", n.Backends()).Str("agent_socket", c.hostAgent.Socket).Str("metrics", admin).Str("version", actor.Version()).Msg("serving")
	fmt.Fprintf(e.stdout, "ready %s\n", n.Addr())
	if f, ok := e.stdout.(interface{ Sync() error }); ok {
		_ = f.Sync()
	}
	if err := sdNotify("READY=1"); err != nil {
		zl.Warn().Err(err).Msg("sd_notify READY=1")
	}
	<-ctx.Done()
	zl.Info().Str("cause", context.Cause(ctx).Error()).Msg("shutting down")
	_ = sdNotify("STOPPING=1")
	return nil
}

// autoMetricsListen is --metrics-listen's default: see listenAdmin.
const autoMetricsListen = "auto"

// listenAdmin binds the admin listener. An address given explicitly must
// bind. The default (auto) takes 127.0.0.1 at the --listen port + 1, and a
// free port where that one is taken or --listen's port is 0: a second
// daemon on the host never fails to start for its admin port.
func listenAdmin(a *adminServer, metricsListen, listen string, zl zerolog.Logger) error {
	if metricsListen != autoMetricsListen {
		return a.listen(metricsListen)
	}
	want := adminFor(listen)
	err := a.listen(want)
	if err == nil || want == "127.0.0.1:0" {
		return err
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	if err := a.listen("127.0.0.1:0"); err != nil {
		return err
	}
	zl.Warn().Str("taken", want).Str("metrics", a.Addr()).Msg("admin port taken: serving /metrics on a free port (set --metrics-listen to choose)")
	return nil
}

// adminFor is the admin address auto picks for listen: 127.0.0.1 at its
// port + 1, or port 0 where listen's port is 0 (or the last one).
func adminFor(listen string) string {
	_, port, err := net.SplitHostPort(listen)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil || p <= 0 || p >= 65535 {
		return "127.0.0.1:0"
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1))
}
