package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/certs"
	"github.com/rdmamgr/rdmamgr/membership"
	"github.com/rdmamgr/rdmamgr/node"
)

// joinCluster registers n's manager as member name in etcd (when --etcd is
// set) and drops the manager's routes to members that leave. The returned
// function leaves (revokes the lease) and stops watching.
func (f *netFlags) joinCluster(ctx context.Context, n *node.Node, name string, log *slog.Logger) (leave func(), err error) {
	if f.etcd == "" {
		return func() {}, nil
	}
	if f.creds != nil {
		// A name is an identity: the one our certificate carries.
		if cn := certs.Name(f.creds.Leaf); name == "" {
			name = cn
		} else if name != cn {
			return nil, usagef("--member %q: our certificate (--tls-cert) is member %q's; a member registers only under its certificate's name", name, cn)
		}
	}
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return nil, usagef("--member: no name given and no host name: %v", err)
		}
	}
	m := membership.Member{
		Name:    name,
		Address: n.Addr(),
		Manager: n.ManagerPID().Id,
		Data:    n.DataAddr(),
		ID:      fmt.Sprintf("%016x", n.Manager().ID()),
	}
	j := &joined{}
	err = j.try(ctx, f, m, n, log)
	if err == nil {
		return j.leave, nil // set by try
	}
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, membership.ErrNotOurName) {
		return nil, err
	}
	// etcd down at start: serve anyway and register when it comes (a
	// running member re-registers by itself the same way), rather than
	// exit and have a service manager restart us in a loop.
	log.Warn("etcd not reachable: serving, not a member yet; registering when it answers", "etcd", f.etcd, "cluster", f.cluster, "err", err)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
			select {
			case <-rctx.Done():
				return
			case <-time.After(wait):
			}
			err := j.try(rctx, f, m, n, log)
			if err == nil || rctx.Err() != nil {
				return
			}
			log.Debug("etcd still not reachable", "etcd", f.etcd, "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.leave != nil {
			j.leave()
		}
	}, nil
}

// joined is a membership once registered: leave undoes it (a no-op
// before).
type joined struct {
	mu    sync.Mutex
	leave func()
}

// try opens the registry and registers m (within 10 s); on success j
// leaves with the registration.
func (j *joined) try(ctx context.Context, f *netFlags, m membership.Member, n *node.Node, log *slog.Logger) error {
	reg, err := f.openMembership(log)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	g, err := reg.Register(rctx, m)
	cancel()
	if err != nil {
		reg.Close()
		return err
	}
	log.Info("member of cluster", "cluster", f.cluster, "name", m.Name, "etcd", f.etcd, "lease_ttl", f.leaseTTL)
	stop := follow(reg, n, log)
	n.SetAgentFarCheck(memberCheck(reg)) // a host agent dials members only
	j.mu.Lock()
	j.leave = func() {
		n.SetAgentFarCheck(nil)
		stop()
		if err := g.Close(); err != nil {
			log.Warn("leaving the cluster", "err", err)
		}
		reg.Close()
	}
	j.mu.Unlock()
	return nil
}

func membersCommand() *command {
	return &command{
		name:     "members",
		synopsis: "--etcd HOST:PORT [--cluster C]",
		short:    "list a cluster's members (etcd)",
		long: `Lists the members registered under --cluster in etcd: name, actor-system
address, manager, data address and id. 'serve --etcd ... --member NAME'
registers a member with a lease; '--peer NAME' finds one.`,
		setup: func(fs *flag.FlagSet) runFunc {
			var nf netFlags
			nf.registerClient(fs)
			return func(ctx context.Context, e *env) error {
				if nf.etcd == "" {
					return usagef("--etcd is required")
				}
				return listMembers(ctx, &nf, e.stdout)
			}
		},
	}
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
	if len(ms) == 0 {
		fmt.Fprintf(stdout, "no members in cluster %q (etcd %s)\n", nf.cluster, nf.etcd)
	}
	for _, m := range ms {
		fmt.Fprintf(stdout, "%s %s %s data=%s id=%s\n", m.Name, m.Address, m.Manager, m.Data, m.ID)
	}
	return nil
}

// follow drops n's routes to members that leave, until the returned
// function is called.
func follow(reg *membership.Registry, n *node.Node, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = reg.Follow(ctx, n.Addr(), n.Manager(), log)
	}()
	return func() { cancel(); <-done }
}

// followCluster makes a client's manager (bench) drop routes to members
// that leave, when --etcd is set.
func (f *netFlags) followCluster(n *node.Node, log *slog.Logger) (stop func(), err error) {
	if f.etcd == "" {
		return func() {}, nil
	}
	reg, err := f.openMembership(log)
	if err != nil {
		return nil, err
	}
	s := follow(reg, n, log)
	return func() { s(); reg.Close() }, nil
}

// memberCheck accepts a host agent address ("host:port" or
// "host:port/name", as node.AgentAddr) of a member of reg's cluster, and
// refuses any other (and every one while etcd cannot be read).
func memberCheck(reg *membership.Registry) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		ms, err := reg.List(ctx)
		if err != nil {
			return err
		}
		for _, m := range ms {
			a := m.Address
			if m.Manager != "" && m.Manager != actor.DefaultName {
				a += "/" + m.Manager
			}
			if a == addr {
				return nil
			}
		}
		return fmt.Errorf("%s is no member's: %w", addr, rdmamgr.ErrUnknownPeer)
	}
}
