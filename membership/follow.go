package membership

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// PeerDropper ends routes to a peer that left; *actor.Manager is one.
type PeerDropper interface {
	DropPeer(addr, why string) int
}

// LeaveGrace is how long Follow waits after a member's record goes before
// it drops the member's routes: a member that lives writes a record someone
// else removed back within it (Register), and is not dropped.
const LeaveGrace = 500 * time.Millisecond

// Follow watches the cluster until ctx ends and tells d about every member
// that leaves (lease ended, clean stop, or moved to a new address), except
// self (our own actor-system address), LeaveGrace after its record went,
// unless by then the record is back at the same address (a member that
// restored its record). It returns ctx's error once the drops it started
// are done. While etcd is away nothing is dropped: routes that are up stay
// up.
func (r *Registry) Follow(ctx context.Context, self string, d PeerDropper, log *slog.Logger) error {
	if log == nil {
		log = r.cfg.Logger
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	return r.Watch(ctx, func(ev Event) {
		if !ev.Left || ev.Member.Address == self {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(LeaveGrace):
			}
			lctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
			m, err := r.Lookup(lctx, ev.Member.Name)
			cancel()
			if err == nil && m.Address == ev.Member.Address {
				log.Warn("member's record went and came back; routes kept", "name", ev.Member.Name, "address", m.Address)
				return
			}
			if ctx.Err() != nil {
				return
			}
			k := d.DropPeer(ev.Member.Address, "membership lease ended")
			log.Info("member left", "name", ev.Member.Name, "address", ev.Member.Address, "routes_dropped", k)
		}()
	})
}
