package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/rdmamgr/rdmamgr/membership"
)

// joinCluster registers n's manager as member name in etcd (when --etcd is
// set) and drops the manager's routes to members that leave. The returned
// function leaves (revokes the lease) and stops watching.
func (f *netFlags) joinCluster(ctx context.Context, n *node, name string, log *slog.Logger) (leave func(), err error) {
	if f.etcd == "" {
		return func() {}, nil
	}
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return nil, usagef("--member: no name given and no host name: %v", err)
		}
	}
	reg, err := f.openMembership(log)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	g, err := reg.Register(rctx, membership.Member{
		Name:    name,
		Address: n.addr,
		Manager: n.mgr.PID().Id,
		Data:    n.mgr.Backend().Addr(),
		ID:      fmt.Sprintf("%016x", n.mgr.ID()),
	})
	cancel()
	if err != nil {
		reg.Close()
		return nil, err
	}
	log.Info("member of cluster", "cluster", f.cluster, "name", name, "etcd", f.etcd, "lease_ttl", f.leaseTTL)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = reg.Watch(wctx, func(ev membership.Event) {
			if !ev.Left || ev.Member.Address == n.addr {
				return
			}
			k := n.mgr.DropPeer(ev.Member.Address, "membership lease ended")
			log.Info("member left", "name", ev.Member.Name, "address", ev.Member.Address, "routes_dropped", k)
		})
	}()
	return func() {
		stop()
		<-done
		if err := g.Close(); err != nil {
			log.Warn("leaving the cluster", "err", err)
		}
		reg.Close()
	}, nil
}

// cmdMembers lists a cluster's members.
func cmdMembers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("members", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nf netFlags
	nf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if nf.etcd == "" {
		return usagef("--etcd is required")
	}
	return listMembers(ctx, &nf, stdout)
}

// listMembers prints one line per member: name, address, manager, data
// address, id.
func listMembers(ctx context.Context, nf *netFlags, stdout io.Writer) error {
	reg, err := nf.openMembership(nil)
	if err != nil {
		return err
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ms, err := reg.List(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		fmt.Fprintf(stdout, "%s %s %s data=%s id=%s\n", m.Name, m.Address, m.Manager, m.Data, m.ID)
	}
	return nil
}
