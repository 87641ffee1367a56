package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// A region its owner revoked is closed to every peer, our own agent
// included (it maps our memory as a peer does), yet the owner itself may
// still Put from it and Get into it. Such an operation goes through a
// bounce region: a fresh region the agent may map, copied from before a
// Put (PutWithImm, Send) and into after a Get. It is the one extra copy
// of the agent path, and only for revoked regions.

// bounce is one operation's bounce region.
type bounce struct {
	h   buffer.Buffer
	mem []byte
}

// bounceMaxRelease bounds the release of a bounce region (the agent's
// mapping of it is cut and drained first).
const bounceMaxRelease = 10 * time.Second

// newBounce returns a bounce region for wr when its local region is
// revoked (nil when it is not), filled with wr.Local for an op that sends
// it, and points p.Local at it.
func (b *Backend) newBounce(wr *backend.WorkRequest, p *agentwire.Post) (*bounce, error) {
	reg, _ := wr.LocalRegion.(*memreg.Region)
	if wr.Op.Atomic() || reg == nil || !reg.Revoked() {
		return nil, nil
	}
	if b.reg == nil {
		return nil, fmt.Errorf("agent: local region %d is revoked and no registry to bounce through: %w", reg.ID(), rdmamgr.ErrRevoked)
	}
	h, err := b.reg.Allocate(uint64(len(wr.Local)), buffer.AccessReadWrite)
	if err != nil {
		return nil, fmt.Errorf("agent: bounce region for revoked region %d: %w", reg.ID(), err)
	}
	mem, err := b.reg.Bytes(h)
	if err != nil {
		b.dropBounce(&bounce{h: h})
		return nil, err
	}
	if wr.Op != backend.OpRead {
		copy(mem, wr.Local)
	}
	p.Local = agentwire.Local{Region: h.Region, Key: h.Key, Length: h.Length}
	return &bounce{h: h, mem: mem}, nil
}

// finishBounce copies a Get's bytes home (ok: it succeeded) and lets the
// bounce region go.
func (b *Backend) finishBounce(x *bounce, wr *backend.WorkRequest, ok bool) {
	if ok && wr.Op == backend.OpRead {
		copy(wr.Local, x.mem)
	}
	b.dropBounce(x)
}

// dropBounce releases a bounce region in the background: Release waits
// until the agent's mapping of it is cut, which must not hold up a
// completion.
func (b *Backend) dropBounce(x *bounce) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), bounceMaxRelease)
		defer cancel()
		if err := b.reg.Release(ctx, x.h); err != nil {
			b.log.Warn("bounce region not released", "region", x.h.Region, "err", err)
		}
	}()
}
