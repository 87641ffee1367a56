package main

import (
	"flag"
	"os"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/remoteguard"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// limitFlags bound what a manager holds. Their defaults are the library's
// (actor/limits.go, remoteguard/config.go), computed for this machine and
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
	routeLinger       time.Duration
	remote            remoteguard.Config
	// defaults of the size flags as printed by -h: a flag left at its
	// default is not passed on, so that the library derives it (a smaller
	// --max-registered clamps --max-region and --max-remote).
	defRegion, defRemote, defRegistered string
	defRemotePerPeer                    int
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	dc := actor.DefaultConfig()
	d := dc.Limits
	l.defRegistered, l.defRegion, l.defRemote = fmtSize(d.MaxBytes), fmtSize(d.MaxRegion), fmtSize(dc.MaxRemoteBytes)
	fs.StringVar(&l.maxRegistered, "max-registered", l.defRegistered,
		"most bytes the manager registers in all (half of physical memory)")
	fs.StringVar(&l.maxRegion, "max-region", l.defRegion, "largest single buffer (a quarter of physical memory, at most --max-registered)")
	fs.IntVar(&l.maxRegions, "max-regions", d.MaxRegions, "most registered regions (16384, or a quarter of vm.max_map_count if lower)")
	fs.StringVar(&l.maxRemote, "max-remote", l.defRemote,
		"most bytes remote peers may hold through request_buffer at once (a quarter of physical memory, at most --max-registered)")
	l.defRemotePerPeer = dc.MaxRemoteBuffersPerPeer
	fs.IntVar(&l.maxRemotePerPeer, "max-remote-buffers", dc.MaxRemoteBuffersPerPeer, "most buffers one remote peer may hold (1024, at most half of --max-regions)")
	fs.DurationVar(&l.remoteLease, "remote-lease", dc.RemoteLease, "lease given to buffers remote peers request without one (0: none)")
	fs.IntVar(&l.maxRoutes, "max-routes", dc.MaxRoutes, "most routes to peers")
	fs.IntVar(&l.handshakesPerPeer, "handshakes-per-peer", dc.HandshakesPerPeer, "most route handshakes accepted from one peer per 30 s")
	fs.DurationVar(&l.routeLinger, "route-linger", dc.RouteLinger, "how long a route outlives its last queue pair, for the next one to reuse (0: closes with it)")
	r := remoteguard.DefaultConfig()
	fs.IntVar(&l.remote.MaxConns, "grpc-max-conns", r.MaxConns, "most control (gRPC) connections served at once")
	fs.IntVar(&l.remote.MaxConnsPerIP, "grpc-max-conns-per-ip", r.MaxConnsPerIP, "most control connections from one address")
	fs.IntVar(&l.remote.MaxStreams, "grpc-max-streams", r.MaxStreams, "most control streams served at once (a peer uses one)")
	fs.DurationVar(&l.remote.HandshakeTimeout, "grpc-handshake-timeout", r.HandshakeTimeout, "time a new control connection has to finish its HTTP/2 handshake")
}

func (l *limitFlags) apply(cfg *actor.Config) error {
	for _, f := range []struct {
		name, v, def string
		dst          *uint64
	}{{"max-registered", l.maxRegistered, l.defRegistered, &cfg.Limits.MaxBytes}, {"max-region", l.maxRegion, l.defRegion, &cfg.Limits.MaxRegion},
		{"max-remote", l.maxRemote, l.defRemote, &cfg.MaxRemoteBytes}} {
		if f.v == "" || f.v == f.def {
			continue // the library's default, clamped to --max-registered
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
	if l.maxRemotePerPeer != l.defRemotePerPeer { // else the library's: at most half of --max-regions
		cfg.MaxRemoteBuffersPerPeer = l.maxRemotePerPeer
	}
	cfg.RemoteLease = l.remoteLease
	if l.remoteLease == 0 {
		cfg.RemoteLease = -1 // asked for none
	}
	cfg.MaxRoutes = l.maxRoutes
	cfg.HandshakesPerPeer = l.handshakesPerPeer
	cfg.RouteLinger = l.routeLinger
	if l.routeLinger <= 0 {
		cfg.RouteLinger = -1 // asked for none
	}
	return nil
}
