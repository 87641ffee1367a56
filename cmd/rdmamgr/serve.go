package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/rdmamgr/rdmamgr/actor"
)

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8090", "actor-system address HOST:PORT, :PORT or [::]:PORT (port 0 picks one); the data listener binds the same host")
	member := fs.String("member", "", "with --etcd: our member name in the cluster (default: the host name)")
	name := fs.String("name", actor.DefaultName, "manager actor name")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the daemon's life to this file")
	var c common
	c.register(fs)
	c.limits.register(fs)
	err := fs.Parse(args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *listen, err = normalizeListen(*listen); err != nil {
		return err
	}
	zl, sl, err := c.logger(stderr)
	if err != nil {
		return err
	}
	stopProfiles, err := startProfiles(*cpuProfile, "")
	if err != nil {
		return err
	}
	defer stopProfiles()
	n, err := startNode(ctx, *listen, &c, sl, *name, true)
	if err != nil {
		return err
	}
	leave, err := c.net.joinCluster(ctx, n, *member, sl)
	if err != nil {
		n.close()
		return err
	}
	zl.Info().Str("addr", n.addr).Str("name", *name).Str("data", n.mgr.Backend().Addr()).
		Str("backend", string(n.mgr.Backend().Kind())).Msg("serving")
	fmt.Fprintf(stdout, "ready %s\n", n.addr)
	if f, ok := stdout.(interface{ Sync() error }); ok {
		_ = f.Sync()
	}
	<-ctx.Done()
	zl.Info().Msg("shutting down")
	leave()
	n.close()
	zl.Info().Msg("stopped")
	return nil
}
