package memreg

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
)

// now is the leases' clock: nanoseconds since the registry's epoch.
func (g *Registry) now() int64 { return coarseclock.Exact() - g.epoch }

// leaseExact is how near its end a lease is checked against the real
// clock; farther from it, expired reads the coarse clock (an atomic load,
// not a clock read per remote request).
const leaseExact = 5 * time.Millisecond

// expired reports whether lease l (0: none) ended. The coarse clock never
// runs ahead, so a coarse reading past l is an end; one more than
// leaseExact before it is taken as live, and between the two the real
// clock decides. A lease thus ends on time, unless the coarse clock's
// ticker runs more than leaseExact late (a starved process), which
// delays the end by as much for admissions (the exact clock still ends a
// stalled payload's wait, LeaseLeft, and refuses a renewal, SetLease).
func (g *Registry) expired(l int64) bool {
	if l == 0 {
		return false
	}
	return g.expiredAt(l, coarseclock.Mono()-g.epoch)
}

// expiredAt is expired with c the coarse clock's reading (on the
// registry's epoch).
func (g *Registry) expiredAt(l, c int64) bool {
	switch {
	case c > l:
		return true
	case l-c > int64(leaseExact):
		return false
	}
	return g.now() > l
}

// SetLease gives remote access to handle b's region a lease of d from now,
// on the owner's clock (d == 0 removes the lease). Renewing is setting it
// again. It fails on a revoked, expired or released region.
func (g *Registry) SetLease(b buffer.Buffer, d time.Duration) error {
	r, err := g.lookup(b)
	if err != nil {
		return err
	}
	if r.revoked.Load() {
		return fmt.Errorf("lease of region %d: %w", r.id, rdmamgr.ErrRevoked)
	}
	if d > 0 {
		g.uncache(r) // the lease is for every holder; later Registers get their own
	}
	for {
		old := r.lease.Load()
		if old != 0 && g.now() > old {
			return fmt.Errorf("lease of region %d: %w", r.id, rdmamgr.ErrExpired)
		}
		var next int64
		if d > 0 {
			next = g.now() + int64(d)
		}
		if r.lease.CompareAndSwap(old, next) {
			g.cut(r) // a shorter lease ends stalled requests sooner
			return nil
		}
	}
}

// LeaseLeft returns how long the region's lease still runs (0, false
// without a lease).
func (g *Registry) LeaseLeft(r *Region) (time.Duration, bool) {
	l := r.lease.Load()
	if l == 0 {
		return 0, false
	}
	return max(time.Duration(l-g.now()), 0), true
}

// Revoke stops remote access to handle b's region: requests not yet
// admitted fail with ErrRevoked, and Revoke returns once the admitted ones
// have finished, so no remote request touches the region after it returns
// nil. Cutters end admitted requests whose payload is stalled, so a holder
// that stops sending cannot hold Revoke (or Release) for long. The owner's own use of the region goes on. When ctx ends first the
// revocation still holds for new requests and ctx's error is returned.
func (g *Registry) Revoke(ctx context.Context, b buffer.Buffer) error {
	r, err := g.lookup(b)
	if err != nil {
		return err
	}
	r.revoked.Store(true)
	g.uncache(r) // revoked for every holder; later Registers get their own
	g.cut(r)
	for _, h := range hooksFor(r, g.hooksSnapshot()) {
		if rv, ok := h.(Revoker); ok {
			if err := rv.RevokeRegion(r); err != nil {
				return fmt.Errorf("revoke region %d: %w", r.id, err)
			}
		}
	}
	if err := waitZero(ctx, &r.remote, r.id); err != nil {
		return err
	}
	// Through the kernel: a process that was handed the region's memfd
	// keeps a mapping of pages that are no longer the region's.
	return g.unexport(ctx, r)
}

// Revoker is implemented by hooks that must cut hardware access when a
// region is revoked (an RDMA backend invalidates its remote key).
type Revoker interface {
	RevokeRegion(r *Region) error
}

// waitZero waits until n drops to zero; remote requests hold references
// for one frame's I/O, so a short poll is enough.
func waitZero(ctx context.Context, n *atomic.Int64, id uint64) error {
	d := 50 * time.Microsecond
	for n.Load() != 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("revoke region %d: requests still in flight: %w", id, ctx.Err())
		}
		d = min(2*d, 5*time.Millisecond)
	}
	return nil
}

// Expired returns handles of regions whose lease ran out (for a reaper).
func (g *Registry) Expired() []*Region {
	now := g.now()
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []*Region
	for _, r := range g.regions {
		if l := r.lease.Load(); l != 0 && now > l {
			out = append(out, r)
		}
	}
	return out
}

// Handle returns a handle to the whole of region r.
func (g *Registry) Handle(r *Region) buffer.Buffer { return g.handle(r) }
