package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Registration keeps one member registered until Close.
type Registration struct {
	r      *Registry
	m      Member
	life   context.Context // ends at Close: ends the keepalive
	cancel context.CancelFunc
	done   chan struct{} // closed when keep and defend have returned
	wg     sync.WaitGroup

	mu       sync.Mutex // guards the fields below
	lease    clientv3.LeaseID
	value    string // our record as written
	restored int    // times defend wrote it back
	rev      int64  // the first registration's revision: defend watches from after it
}

// Register publishes m under its name with a lease of the registry's TTL
// and keeps the lease alive in a goroutine; when etcd goes away and the
// lease lapses, it registers again once etcd is back. A name registered
// again (a restarted member) takes the new address. The first
// registration must succeed within ctx.
//
// With an Identity the record is signed (sign.go) and m.Name must be the
// name its certificate carries (ErrNotOurName). While registered, a record
// of ours that someone else overwrites or removes in etcd is written back
// at once, with a warning; when that fails it says so at error level.
func (r *Registry) Register(ctx context.Context, m Member) (*Registration, error) {
	if m.Name == "" || m.Address == "" {
		return nil, fmt.Errorf("membership: register %+v: want a name and an address", m)
	}
	if err := r.sign(&m); err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	g := &Registration{r: r, m: m, done: make(chan struct{}), life: life, cancel: cancel}
	ka, err := g.put(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	g.wg.Add(2)
	go func() { defer g.wg.Done(); g.keep(life, ka) }()
	go func() { defer g.wg.Done(); g.defend(life) }()
	go func() { g.wg.Wait(); close(g.done) }()
	return g, nil
}

// put grants a lease, writes the record and starts its keepalive.
func (g *Registration) put(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	r := g.r
	ttl := int64((r.cfg.TTL + time.Second - 1) / time.Second)
	lease, err := r.cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("membership: lease: %w", err)
	}
	v, _ := json.Marshal(g.m)
	resp, err := r.cli.Put(ctx, r.prefix()+g.m.Name, string(v), clientv3.WithLease(lease.ID))
	if err != nil {
		return nil, fmt.Errorf("membership: register %q: %w", g.m.Name, err)
	}
	g.mu.Lock()
	g.lease, g.value = lease.ID, string(v)
	if g.rev == 0 {
		g.rev = resp.Header.Revision
	}
	g.mu.Unlock()
	// The keepalive lives as long as the registration, not ctx.
	return r.cli.KeepAlive(g.life, lease.ID)
}

// keep drains keepalive answers; when the channel closes (lease lost or
// etcd gone) it registers again every second until it works or Close.
func (g *Registration) keep(life context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	for {
		for range ka {
		}
		if life.Err() != nil {
			return
		}
		g.r.cfg.Logger.Warn("membership lease lost; registering again", "name", g.m.Name)
		for {
			select {
			case <-life.Done():
				return
			case <-time.After(time.Second):
			}
			ctx, cancel := context.WithTimeout(life, g.r.cfg.DialTimeout)
			var err error
			ka, err = g.put(ctx)
			cancel()
			if err == nil {
				g.r.cfg.Logger.Info("membership registered again", "name", g.m.Name)
				break
			}
		}
	}
}

// Close stops the keepalive and revokes the lease (the member leaves at
// once). It waits at most 2 s for etcd.
func (g *Registration) Close() error {
	g.cancel() // ends the keepalive channel, and keep
	<-g.done
	g.mu.Lock()
	lease := g.lease
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := g.r.cli.Revoke(ctx, lease)
	return err
}

func zapNop() *zap.Logger { return zap.NewNop() }
