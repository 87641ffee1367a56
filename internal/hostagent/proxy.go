//go:build linux

package hostagent

import (
	"context"
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
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
// need), mapping it on first use (ctx bounds the mapping). The proxy
// grants what the process's region grants (the process's owner code
// decides, at the mapping). Errors: the owner's refusal (ErrBadKey,
// ErrAccess, ErrReleased, ...), ErrAccess for a need the region does not
// grant, ErrPeerGone once the process goes.
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
				continue // another key's attempt failed: try ours
			}
			return buffer.Buffer{}, fmt.Errorf("hostagent: region %d of pid %d: %w", region, p.pid, rdmamgr.ErrBadKey)
		}
		if x.err != nil {
			return buffer.Buffer{}, x.err
		}
		if !x.h.Access.Allows(need) {
			return buffer.Buffer{}, fmt.Errorf("hostagent: region %d of pid %d grants %v, not %v: %w", region, p.pid, x.h.Access, need, rdmamgr.ErrAccess)
		}
		return x.h, nil
	}
}

// cachedProxy is proxyOf when the proxy is mapped already: the zero
// Buffer (and no error) when it is not, or is being mapped.
func (p *proc) cachedProxy(region uint64, key buffer.Key, need buffer.Access) (buffer.Buffer, error) {
	p.mu.Lock()
	x := p.proxies[region]
	p.mu.Unlock()
	if x == nil {
		return buffer.Buffer{}, nil
	}
	select {
	case <-x.ready:
	default:
		return buffer.Buffer{}, nil
	}
	switch {
	case x.err != nil:
		return buffer.Buffer{}, nil // gone from the map: proxyOf maps anew
	case !x.key.Equal(key):
		return buffer.Buffer{}, fmt.Errorf("hostagent: region %d of pid %d: %w", region, p.pid, rdmamgr.ErrBadKey)
	case !x.h.Access.Allows(need):
		return buffer.Buffer{}, fmt.Errorf("hostagent: region %d of pid %d grants %v, not %v: %w", region, p.pid, x.h.Access, need, rdmamgr.ErrAccess)
	}
	return x.h, nil
}

// mapProxy maps region into x (which is in p.proxies) and registers it
// with what the region grants.
func (p *proc) mapProxy(ctx context.Context, x *proxy, region uint64, need buffer.Access) (buffer.Buffer, error) {
	mem, gate, err := p.pr.MapProxy(ctx, region, x.key, need)
	var h buffer.Buffer
	if err == nil {
		g, ok := gate.(wiring.ProxyGate)
		if !ok {
			err = fmt.Errorf("hostagent: gate %T tells no access: %w", gate, rdmamgr.ErrNotSupported)
		} else if h, err = p.a.reg.RegisterProxy(mem, g.Access(), gate); err != nil {
			g.Close() // never registered: let the mapping go
		}
	}
	p.mu.Lock()
	x.h, x.err = h, err
	cut := x.cut
	if err != nil || cut {
		if p.proxies[region] == x {
			delete(p.proxies, region)
		}
	}
	if err == nil && cut {
		// Before ready: the process's end waits for ready, and Close
		// then for a.wg, so the release is waited for.
		p.releaseLater(x)
	}
	close(x.ready)
	p.mu.Unlock()
	if err == nil && cut {
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
}

// releaseProxies releases every proxy of the process (it is going: no new
// ones are made) and waits, for the mappings under way too (a Resolve's:
// its context bounds it; mapProxy releases one that succeeds, as cut):
// else one could be registered, and released, after Close returned.
func (p *proc) releaseProxies() {
	p.mu.Lock()
	xs := make([]*proxy, 0, len(p.proxies))
	var mapping []*proxy
	for r, x := range p.proxies {
		delete(p.proxies, r)
		select {
		case <-x.ready:
			xs = append(xs, x)
		default:
			x.cut = true
			mapping = append(mapping, x)
		}
	}
	p.mu.Unlock()
	for _, x := range mapping {
		<-x.ready
	}
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
