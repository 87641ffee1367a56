package membership

import (
	"context"
	"log/slog"
)

// PeerDropper ends routes to a peer that left; *actor.Manager is one.
type PeerDropper interface {
	DropPeer(addr, why string) int
}

// Follow watches the cluster until ctx ends and tells d about every member
// that leaves (lease ended, clean stop, or moved to a new address), except
// self (our own actor-system address). It returns ctx's error. While etcd is
// away nothing is dropped: routes that are up stay up.
func (r *Registry) Follow(ctx context.Context, self string, d PeerDropper, log *slog.Logger) error {
	if log == nil {
		log = r.cfg.Logger
	}
	return r.Watch(ctx, func(ev Event) {
		if !ev.Left || ev.Member.Address == self {
			return
		}
		k := d.DropPeer(ev.Member.Address, "membership lease ended")
		log.Info("member left", "name", ev.Member.Name, "address", ev.Member.Address, "routes_dropped", k)
	})
}
