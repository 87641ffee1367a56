//go:build linux

package hostagent

import (
	"context"
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// proxy is a region of an attached process mapped into our registry.
type proxy struct {
	key   buffer.Key    // the process's key of the region
	ready chan struct{} // closed when the mapping ended; then below is fixed
	h     buffer.Buffer // the proxy region (whole) in our registry
	err   error
	// cut: the process cut the region while it was being mapped (p.mu).
	cut bool
}

// proxyOf returns the proxy of the process's region (checked by key, for
// need), mapping it on first use (ctx bounds the mapping). A proxy that
// lacks need is replaced by one mapped for both its access and need (the
// process's owner code decides). Errors: the owner's refusal (ErrBadKey,
// ErrAccess, ErrReleased, ...), ErrPeerGone once the process goes.
func (p *proc) proxyOf(ctx context.Context, region uint64, key buffer.Key, need buffer.Access) (buffer.Buffer, error) {
	for {
		p.mu.Lock()
		if p.opsDone != nil {
			p.mu.Unlock()
			return buffer.Buffer{}, fmt.Errorf("hostagent: pid %d: %w", p.pid, rdmamgr.ErrPeerGone)
		}
		x := p.proxies[region]
		if x == nil {
			x = &proxy{key: key, ready: make(chan struct{})}
			p.proxies[region] = x
			p.mu.Unlock()
			return p.mapProxy(ctx, x, region, need)
		}
		p.mu.Unlock()
		select {
		case <-x.ready:
		case <-ctx.Done():
			return buffer.Buffer{}, ctx.Err()
		}
		if !x.key.Equal(key) {
			if x.err != nil {
				continue // a wrong key's attempt failed: try ours
			}
			return buffer.Buffer{}, fmt.Errorf("hostagent: region %d of pid %d: %w", region, p.pid, rdmamgr.ErrBadKey)
		}
		if x.err != nil {
			return buffer.Buffer{}, x.err
		}
		if x.h.Access&need == need {
			return x.h, nil
		}
		// More access than mapped for: map again for both.
		y := &proxy{key: key, ready: make(chan struct{})}
		p.mu.Lock()
		if p.proxies[region] != x {
			p.mu.Unlock()
			continue
		}
		p.proxies[region] = y
		p.mu.Unlock()
		h, err := p.mapProxy(ctx, y, region, x.h.Access|need)
		if err != nil {
			p.mu.Lock()
			if p.proxies[region] == nil && !y.cut {
				p.proxies[region] = x // keep the old one for what it grants
				p.mu.Unlock()
			} else {
				p.mu.Unlock()
				p.releaseLater(x)
			}
			return h, err
		}
		p.releaseLater(x)
		return h, nil
	}
}

// mapProxy maps region into x (which is in p.proxies) and registers it.
func (p *proc) mapProxy(ctx context.Context, x *proxy, region uint64, need buffer.Access) (buffer.Buffer, error) {
	mem, gate, err := p.pr.MapProxy(ctx, region, x.key, need)
	var h buffer.Buffer
	if err == nil {
		h, err = p.a.reg.RegisterProxy(mem, need, gate)
		if err != nil {
			if c, ok := gate.(interface{ Close() }); ok {
				c.Close() // never registered: let the mapping go
			}
		}
	}
	p.mu.Lock()
	x.h, x.err = h, err
	cut := x.cut
	if err != nil || cut {
		if p.proxies[region] == x {
			delete(p.proxies, region)
		}
	} else {
		p.byProxy[h.Region] = x
	}
	close(x.ready)
	p.mu.Unlock()
	if err == nil && cut {
		p.releaseLater(x)
		return buffer.Buffer{}, fmt.Errorf("hostagent: region %d of pid %d: %w", region, p.pid, rdmamgr.ErrRevoked)
	}
	return h, err
}

// onCut is the shm route's cut notice: the process cut region (revoked,
// released, a new lease) or the route ended. The proxy goes: new users
// are refused, the frames in flight on it are cut, the operations whose
// local memory it is are cancelled, and it is released. Not blocking.
func (p *proc) onCut(region uint64) {
	p.mu.Lock()
	x := p.proxies[region]
	if x != nil {
		delete(p.proxies, region)
		select {
		case <-x.ready:
		default:
			x.cut = true // mapProxy releases it
			x = nil
		}
	}
	var ops []*op
	for _, o := range p.ops {
		if o.post.Local.Region == region && !o.post.Op.Atomic() {
			ops = append(ops, o)
		}
	}
	p.mu.Unlock()
	for _, o := range ops {
		o.cancel(fmt.Errorf("hostagent: local region %d cut by its owner: %w", region, rdmamgr.ErrRevoked))
	}
	if x != nil {
		p.releaseLater(x)
	}
}

// releaseLater releases a proxy in the background (the agent waits for it
// at Close): Release cuts what is in flight on it and waits for its Refs.
func (p *proc) releaseLater(x *proxy) {
	p.a.wg.Add(1)
	go func() {
		defer p.a.wg.Done()
		p.release(x)
	}()
}

func (p *proc) release(x *proxy) {
	if x.err != nil || x.h.Region == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := p.a.reg.Release(ctx, x.h); err != nil {
		p.a.log.Warn("proxy release", "pid", p.pid, "err", err)
	}
	p.mu.Lock()
	if p.byProxy[x.h.Region] == x {
		delete(p.byProxy, x.h.Region)
	}
	p.mu.Unlock()
}

// releaseProxies releases every proxy of the process (it is going: no new
// ones are made) and waits.
func (p *proc) releaseProxies() {
	p.mu.Lock()
	xs := make([]*proxy, 0, len(p.proxies))
	for r, x := range p.proxies {
		delete(p.proxies, r)
		select {
		case <-x.ready:
			xs = append(xs, x)
		default:
			x.cut = true
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, x := range xs {
		wg.Add(1)
		go func() { defer wg.Done(); p.release(x) }()
	}
	wg.Wait()
}

// resolver is the Agent as the TCP backend's agentapi.Resolver.
type resolver Agent

// Resolve implements agentapi.Resolver.
func (r *resolver) Resolve(ctx context.Context, via uint16, region uint64, key buffer.Key, need buffer.Access) (uint64, buffer.Key, error) {
	p, err := (*Agent)(r).procAt(via)
	if err != nil {
		return 0, buffer.Key{}, err
	}
	h, err := p.proxyOf(ctx, region, key, need)
	if err != nil {
		return 0, buffer.Key{}, err
	}
	return h.Region, h.Key, nil
}

// Inbox implements agentapi.Resolver.
func (r *resolver) Inbox(via uint16) (backend.Inbox, error) {
	p, err := (*Agent)(r).procAt(via)
	if err != nil {
		return nil, err
	}
	return (*procInbox)(p), nil
}
