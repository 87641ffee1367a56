package membership

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// defend watches our own record until life ends and writes it back when
// someone else removes it, or overwrites it with a record that does not
// verify (a writer to etcd that is not us). A record that verifies under
// our name (signed with our certificate's key: a restart of this member
// elsewhere), or any record without Roots to verify it, takes the name
// over: defend says so at error level and stops. A lapsed lease is keep's
// to handle.
func (g *Registration) defend(life context.Context) {
	key := g.r.prefix() + g.m.Name
	g.mu.Lock()
	next := g.rev + 1 // nothing between our put and the watch is missed
	g.mu.Unlock()
	for life.Err() == nil {
		wc := g.r.cli.Watch(clientv3.WithRequireLeader(life), key, clientv3.WithRev(next))
		for wr := range wc {
			if wr.CompactRevision != 0 {
				next = wr.CompactRevision
			}
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				next = ev.Kv.ModRevision + 1
				g.mu.Lock()
				ours := g.value
				g.mu.Unlock()
				if ev.Type == clientv3.EventTypePut && string(ev.Kv.Value) == ours {
					continue
				}
				if ev.Type == clientv3.EventTypePut {
					if m, err := g.r.decode(key, ev.Kv.Value); err == nil {
						g.r.cfg.Logger.Error("membership: another registration of our name took it over; we no longer defend it",
							"name", g.m.Name, "address", g.m.Address, "new_address", m.Address)
						return
					}
				}
				g.restore(life, key, ev.Type == clientv3.EventTypeDelete)
			}
		}
		select {
		case <-life.Done():
		case <-time.After(time.Second):
		}
	}
}

// restore writes our record back under our lease.
func (g *Registration) restore(life context.Context, key string, removed bool) {
	if life.Err() != nil {
		return // Close revoked the lease
	}
	what := "overwritten"
	if removed {
		what = "removed"
	}
	log := g.r.cfg.Logger
	log.Warn("membership: our record was "+what+" in etcd by someone else while we live; restoring it", "name", g.m.Name, "key", key)
	g.mu.Lock()
	lease, value := g.lease, g.value
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(life, g.r.cfg.DialTimeout)
	defer cancel()
	_, err := g.r.cli.Put(ctx, key, value, clientv3.WithLease(lease))
	switch {
	case err == nil:
		g.mu.Lock()
		g.restored++
		g.mu.Unlock()
	case life.Err() != nil:
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// The lease lapsed: keep registers again with a new one.
	default:
		log.Error("membership: could not restore our record: peers looking us up by name will not find us", "name", g.m.Name, "err", err)
	}
}

// Restored reports how many times our record was written back after
// someone else overwrote or removed it.
func (g *Registration) Restored() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.restored
}
