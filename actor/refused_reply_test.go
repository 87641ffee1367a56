package actor

import (
	"errors"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// TestRefusedReplyReleased: a RequestBuffer reply the client refuses
// (ErrBadResponse: a Location other than asked, or one that does not
// decode) does not leak the buffer the owner allocated for it: the client
// releases it at the owner.
func TestRefusedReplyReleased(t *testing.T) {
	ctx := testCtx(t)
	sys, _, b := newPair(t)
	for _, loc := range []uint32{uint32(buffer.CUDA(0)), 1 << 20} {
		// A proxy in front of b that rewrites the reply's location.
		proxy := sys.Root.Spawn(protoactor.PropsFromFunc(func(c protoactor.Context) {
			switch msg := c.Message().(type) {
			case *rdmapb.RequestBuffer, *rdmapb.ReleaseBuffer:
				res, err := c.RequestFuture(b.PID(), msg, testTimeout).Result()
				if err != nil {
					t.Errorf("proxy: %v", err)
					return
				}
				if r, ok := res.(*rdmapb.RequestBufferResponse); ok && r.Buffer != nil {
					r.Buffer.Location = loc
				}
				c.Respond(res)
			}
		}))
		_, err := NewClient(sys, proxy).RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
		sys.Root.Stop(proxy)
		if !errors.Is(err, rdmamgr.ErrBadResponse) {
			t.Fatalf("reply at location %d: %v, want ErrBadResponse", loc, err)
		}
		if st := b.reg.Stats(); st.Regions != 0 {
			t.Fatalf("reply at location %d refused: %d regions left at the owner", loc, st.Regions)
		}
	}
}
