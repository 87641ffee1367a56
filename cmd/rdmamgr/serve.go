package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/rdmamgr/rdmamgr/actor"
)

func serveCommand() *command {
	return &command{
		name:     "serve",
		synopsis: "[--listen HOST:PORT] [flags]",
		short:    "run a manager daemon",
		long: `Runs a manager daemon: the manager actor on --listen, its data listener on the
same host, and an admin listener (--metrics-listen, default ` + defaultMetricsListen + `) with
/metrics (Prometheus), /healthz, /readyz and, with --pprof, /debug/pprof/ (an
address beyond loopback is warned about on stderr). Prints "ready ADDR"
on stdout once peers can reach it and, under systemd Type=notify, sends READY=1.
SIGINT or SIGTERM stops it (exit 0).`,
		interruptOK: true,
		setup:       serveFlags,
	}
}

func serveFlags(fs *flag.FlagSet) runFunc {
	listen := fs.String("listen", "127.0.0.1:8090", "actor-system address `HOST:PORT`, :PORT or [::]:PORT (port 0 picks one); the data listener binds the same host")
	member := fs.String("member", "", "with --etcd: our member `name` in the cluster (default: the name --tls-cert carries, which it must then be; else the host name)")
	name := fs.String("name", actor.DefaultName, "manager actor `name`")
	metricsListen := fs.String("metrics-listen", defaultMetricsListen, "admin listener `HOST:PORT` for /metrics, /healthz, /readyz (\"\" or off: none; beyond loopback: warned)")
	pprofOn := fs.Bool("pprof", false, "also serve /debug/pprof/ (command line, goroutines, heap, profiles) on the admin listener")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the daemon's life to this `file`")
	var c common
	c.registerLog(fs, "info")
	c.registerManager(fs)
	c.limits.register(fs)
	return func(ctx context.Context, e *env) error {
		var err error
		if *listen, err = normalizeListen(*listen); err != nil {
			return err
		}
		if *metricsListen == "off" {
			*metricsListen = ""
		}
		if *metricsListen != "" {
			if _, _, err := splitHostPort(*metricsListen); err != nil {
				return usagef("--metrics-listen %q: want HOST:PORT, or \"\" for none", *metricsListen)
			}
		}
		c.pprof = *pprofOn
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
		if err := a.listen(metricsListen); err != nil {
			return err
		}
		warnAdminExposure(e.stderr, &zl, metricsListen, a.Addr(), c.pprof)
		defer a.close() // first: /readyz fails before the manager closes
		admin = "http://" + a.Addr() + "/metrics"
	}
	zl.Info().Str("addr", n.Addr()).Str("name", name).Str("data", n.DataAddr()).
		Str("backend", n.Backends()).Str("metrics", admin).Str("version", actor.Version()).Msg("serving")
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
