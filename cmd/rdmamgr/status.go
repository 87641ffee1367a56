package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func statusCommand() *command {
	return &command{
		name:     "status",
		synopsis: "--peer ADDR [--json] [--watch INTERVAL]",
		short:    "show a manager's routes, buffers and counters",
		long: `Asks the manager at --peer for its state: version and uptime, routes out (set up
by it) and in (set up by peers) with peer, backend and why that backend (the
backends passed over before it and their reasons, or "first choice"), age,
operations, bytes and errors, buffers, what it served for peers, and
authentication failures.
--timeout bounds each query, connection included.`,
		setup: statusFlags,
	}
}

// statusArgs are status's flags after parsing.
type statusArgs struct {
	peer, peerName, listen string
	timeout, watch         time.Duration
	asJSON                 bool
	c                      common
}

func statusFlags(fs *flag.FlagSet) runFunc {
	a := &statusArgs{}
	fs.StringVar(&a.peer, "peer", "", "manager address `HOST:PORT`, or a member name with --etcd (required)")
	fs.StringVar(&a.peerName, "peer-name", actor.DefaultName, "manager actor `name`")
	fs.StringVar(&a.listen, "listen", "", "our actor-system address `HOST:PORT` for replies (default: the local address of the route to the peer, port 0)")
	fs.DurationVar(&a.timeout, "timeout", 5*time.Second, "bound on each query, connection included")
	fs.BoolVar(&a.asJSON, "json", false, "print JSON (with --watch: one object per line)")
	fs.DurationVar(&a.watch, "watch", 0, "query again every `interval` until interrupted")
	a.c.registerLog(fs, "warn")
	a.c.registerMaxMsg(fs)
	a.c.registerSecret(fs)
	a.c.net.registerClient(fs)
	return func(ctx context.Context, e *env) error { return status(ctx, e, a) }
}

// status asks the manager at --peer, once or every --watch.
func status(ctx context.Context, e *env, a *statusArgs) error {
	switch {
	case a.peer == "":
		return usagef("--peer is required")
	case a.timeout <= 0:
		return usagef("--timeout %v: want a positive duration", a.timeout)
	case a.watch < 0:
		return usagef("--watch %v: want a positive interval", a.watch)
	}
	_, sl, err := a.c.logger(e.stderr)
	if err != nil {
		return err
	}
	qctx, cancel := context.WithTimeout(ctx, a.timeout)
	pid, lis, err := a.c.net.peerAndListen(qctx, a.peer, a.peerName, a.listen, sl)
	if err == nil {
		err = probe(qctx, pid.Address, &a.c)
	}
	cancel()
	if err != nil {
		return err
	}
	n, err := startNode(ctx, lis, &a.c, sl, "", false)
	if err != nil {
		return err
	}
	defer closeWithin(n, time.Second)
	return a.query(ctx, e, actor.NewClient(n.System(), pid))
}

// query prints the status of the manager behind client, and again every
// --watch until ctx ends.
func (a *statusArgs) query(ctx context.Context, e *env, client *actor.Client) error {
	for {
		qctx, cancel := context.WithTimeout(ctx, a.timeout)
		st, err := client.Status(qctx)
		cancel()
		if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rdmamgr.ErrTimeout)) {
			return fmt.Errorf("%s: no answer within --timeout %v", a.peer, a.timeout)
		}
		if err != nil {
			return err
		}
		if err := printStatus(e, st, a.asJSON); err != nil {
			return err
		}
		if a.watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errInterrupted
		case <-time.After(a.watch):
		}
		if !a.asJSON {
			fmt.Fprintln(e.stdout)
		}
	}
}

// probe connects to the manager's address once, so that a refused or
// unreachable address is reported as such at once instead of as a
// timeout of the request.
func probe(ctx context.Context, addr string, cm *common) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: connection refused (is a manager serving there?)", addr)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: no connection within --timeout", addr)
	case err != nil:
		return fmt.Errorf("%s: %w", addr, err)
	}
	defer c.Close()
	return probeAuth(ctx, c, addr, cm) // probe.go
}

func printStatus(e *env, st *rdmapb.StatusResponse, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(statusJSON(st))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	w := e.stdout
	fmt.Fprintf(w, "manager %016x at %s, version %s, up %v\n", st.ManagerId, st.Address, st.Version, msDur(st.UptimeMs).Round(time.Second))
	fmt.Fprintf(w, "backend %s, data %s\n", st.Backend, st.DataAddr)
	fmt.Fprintf(w, "buffers: %d, %s registered (cap %s), %s held by remote peers (cap %s), %d leased; queue pairs: %d\n",
		st.BuffersTotal, fmtBytes(st.RegisteredBytes), fmtBytes(st.MaxRegisteredBytes), fmtBytes(st.RemoteBytes),
		fmtBytes(st.MaxRemoteBytes), st.LeasedBuffers, st.QueuePairs)
	fmt.Fprintf(w, "routes out: %d\n", len(st.Routes))
	for _, r := range st.Routes {
		fmt.Fprintf(w, "  %s peer_id=%016x backend=%s state=%s age=%v refs=%d ops=%d put=%s got=%s errors=%d why=%q\n",
			r.PeerAddr, r.PeerId, r.Backend, r.State, msDur(r.AgeMs).Round(time.Second), r.Refs, r.Ops, fmtBytes(r.BytesPut), fmtBytes(r.BytesGot), r.Errors, r.Why)
	}
	fmt.Fprintf(w, "routes in: %d\n", len(st.Inbound))
	for _, r := range st.Inbound {
		fmt.Fprintf(w, "  %s peer_id=%016x backend=%s state=%s age=%v ops=%d in=%s out=%s rejected=%d why=%q\n", r.PeerAddr, r.PeerId, r.Backend,
			r.State, msDur(r.AgeMs).Round(time.Second), r.Ops, fmtBytes(r.BytesPut), fmtBytes(r.BytesGot), r.Errors, r.Why)
	}
	fmt.Fprintf(w, "served for peers: %d ops, %s written in, %s read out, %d rejected\n",
		st.ServedOps, fmtBytes(st.ServedBytesIn), fmtBytes(st.ServedBytesOut), st.RejectedOps)
	fmt.Fprintf(w, "goroutines: %d, auth failures: %d\n", st.Goroutines, st.AuthFailures)
	reasons := slices.Sorted(maps.Keys(st.Refusals))
	fmt.Fprintf(w, "refusals: %d reasons\n", len(reasons))
	for _, r := range reasons {
		fmt.Fprintf(w, "  %-16s %d\n", r, st.Refusals[r])
	}
	return nil
}

func msDur(ms uint64) time.Duration { return time.Duration(ms) * time.Millisecond }

func devicesCommand() *command {
	return &command{
		name: "devices", short: "list the RDMA devices this build can use",
		long: `Lists RDMA devices, ports and GIDs. A build without ibverbs (the default;
build with -tags ibverbs) has none and says so.`,
		setup: func(fs *flag.FlagSet) runFunc {
			return func(ctx context.Context, e *env) error { return devices(e) }
		},
	}
}

func devices(e *env) error {
	devs, err := ibverbs.Devices()
	if errors.Is(err, ibverbs.ErrNotBuilt) {
		fmt.Fprintln(e.stdout, "no devices (built without ibverbs)")
		return nil
	}
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		fmt.Fprintln(e.stdout, "no devices")
		return nil
	}
	for _, d := range devs {
		fmt.Fprintf(e.stdout, "%s port %d %s\n", d.Name, d.Port, d.State)
		for _, g := range d.GIDs {
			fmt.Fprintf(e.stdout, "  gid %s\n", g)
		}
	}
	return nil
}
