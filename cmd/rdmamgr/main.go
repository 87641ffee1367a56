package main

import (
	"flag"
	"os"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// limitFlags bound what a manager holds; zero means the library default.
type limitFlags struct {
	maxRegistered string
	maxRemote     string
	remoteLease   time.Duration
	maxRoutes     int
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.maxRegistered, "max-registered", "", "most bytes the manager registers in all (e.g. 8GiB; default no limit)")
	fs.StringVar(&l.maxRemote, "max-remote", "", "most bytes remote peers may hold through request_buffer at once (default no cap)")
	fs.DurationVar(&l.remoteLease, "remote-lease", 0, "lease given to buffers remote peers request without one (0: none)")
	fs.IntVar(&l.maxRoutes, "max-routes", 0, "most routes to peers (default 4096)")
}

func (l *limitFlags) apply(cfg *actor.Config) error {
	if l.maxRegistered != "" {
		n, err := parseSize(l.maxRegistered)
		if err != nil {
			return usagef("--max-registered: %v", err)
		}
		cfg.Limits.MaxBytes = n
	}
	if l.maxRemote != "" {
		n, err := parseSize(l.maxRemote)
		if err != nil {
			return usagef("--max-remote: %v", err)
		}
		cfg.MaxRemoteBytes = n
	}
	cfg.RemoteLease = l.remoteLease
	cfg.MaxRoutes = l.maxRoutes
	return nil
}
