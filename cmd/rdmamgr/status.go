package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	peer := fs.String("peer", "", "manager address HOST:PORT, or a member name with --etcd")
	peerName := fs.String("peer-name", actor.DefaultName, "manager actor name")
	listen := fs.String("listen", "", "our actor-system address for replies (default: the local address of the route to the peer, port 0)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	var c common
	c.register(fs)
	c.logLevel = "warn"
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *peer == "" {
		return usagef("--peer is required")
	}
	_, sl, err := c.logger(stderr)
	if err != nil {
		return err
	}
	pid, lis, err := c.net.peerAndListen(ctx, *peer, *peerName, *listen, sl)
	if err != nil {
		return err
	}
	n, err := startNode(ctx, lis, &c, sl, "", false)
	if err != nil {
		return err
	}
	defer n.close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := actor.NewClient(n.sys, pid).Status(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "manager %016x at %s\n", st.ManagerId, st.Address)
	fmt.Fprintf(stdout, "backend %s, data %s\n", st.Backend, st.DataAddr)
	fmt.Fprintf(stdout, "buffers: %d, %s registered (cap %s), %s held by remote peers (cap %s)\n", st.BuffersTotal,
		fmtBytes(st.RegisteredBytes), fmtBytes(st.MaxRegisteredBytes), fmtBytes(st.RemoteBytes), fmtBytes(st.MaxRemoteBytes))
	for _, b := range st.Buffers {
		kind := "allocated"
		if b.UserMemory {
			kind = "user"
		}
		fmt.Fprintf(stdout, "  region %-6d %12s  %-10s %s\n", b.Region, fmtBytes(b.Length), buffer.Access(b.Access), kind)
	}
	fmt.Fprintf(stdout, "routes: %d\n", len(st.Routes))
	for _, r := range st.Routes {
		fmt.Fprintf(stdout, "  %s peer=%016x state=%s refs=%d ops=%d put=%s got=%s errors=%d\n",
			r.PeerAddr, r.PeerId, r.State, r.Refs, r.Ops, fmtBytes(r.BytesPut), fmtBytes(r.BytesGot), r.Errors)
	}
	fmt.Fprintf(stdout, "served for peers: %d frames, %s written in, %s read out, %d rejected\n",
		st.ServedOps, fmtBytes(st.ServedBytesIn), fmtBytes(st.ServedBytesOut), st.RejectedOps)
	fmt.Fprintf(stdout, "goroutines: %d, auth failures: %d\n", st.Goroutines, st.AuthFailures)
	reasons := slices.Sorted(maps.Keys(st.Refusals))
	fmt.Fprintf(stdout, "refusals: %d reasons\n", len(reasons))
	for _, r := range reasons {
		fmt.Fprintf(stdout, "  %-16s %d\n", r, st.Refusals[r])
	}
	return nil
}

func cmdDevices(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("devices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	devs, err := ibverbs.Devices()
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		fmt.Fprintln(stdout, "no RDMA devices found")
		return nil
	}
	for _, d := range devs {
		fmt.Fprintf(stdout, "%s port %d %s\n", d.Name, d.Port, d.State)
		for _, g := range d.GIDs {
			fmt.Fprintf(stdout, "  gid %s\n", g)
		}
	}
	return nil
}
