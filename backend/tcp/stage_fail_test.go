package tcp

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

// noPinned is a driver whose pinned allocations fail (pinned memory
// exhausted): the server cannot stage.
type noPinned struct {
	cuda.Driver
	tries atomic.Int32
}

func (d *noPinned) HostAlloc(cuda.Context, uint64) ([]byte, error) {
	d.tries.Add(1)
	return nil, errors.New("cuMemHostAlloc: out of memory")
}

// A WRITE of device memory the server cannot stage (no pinned buffer)
// is refused, and its payload, drained, holds neither a revocation nor a
// release: the region's reference goes before the drain, as on a cut.
func TestStagingFailureLetsRegionGo(t *testing.T) {
	for _, release := range []bool{false, true} {
		p := newPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute})
		w := cudafake.NewWorld(cudafake.Config{})
		fd := w.Process()
		t.Cleanup(func() { fd.Close() })
		d := &noPinned{Driver: fd}
		p.regB.SetCUDA(d, nil)
		h, err := p.regB.AllocateAt(buffer.CUDA(0), cutRegion, buffer.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		h2, mem2 := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
		payload := backendtest.RandomData(t, cutRegion)
		c := authed(t, p.b)
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: uint32(len(payload)), wrid: 7, region: h.Region, key: h.Key}))
		writeRaw(t, c, payload[:cutSent])
		waitFor(t, "the server to try to stage", func() bool { return d.tries.Load() > 0 })
		if release {
			err = p.regB.Release(shortCtx(t), h)
		} else {
			err = p.regB.Revoke(shortCtx(t), h)
		}
		if err != nil {
			t.Fatalf("release %v: with an unstaged device write's payload stalled: %v", release, err)
		}
		writeRaw(t, c, payload[cutSent:])
		r := readResp(t, c)
		if r.code == 0 || r.wrid != 7 {
			t.Fatalf("response %+v, want a refusal", r)
		}
		// In step: the next request on the same connection is served.
		writeRaw(t, c, reqBytes(reqHeader{op: opWrite, length: 512, wrid: 8, region: h2.Region, key: h2.Key}))
		writeRaw(t, c, payload[:512])
		if r := readResp(t, c); r.code != 0 || r.wrid != 8 {
			t.Fatalf("next write on the connection: %+v", r)
		}
		backendtest.AssertSame(t, "next write", mem2[:512], payload[:512])
		if st := w.Stats(); st.CopiesHtoD != 0 {
			t.Fatalf("a copy reached the device: %+v", st)
		}
	}
}

// shortCtx bounds a revocation that must not wait for the peer (the
// frame timeout is 10 minutes).
func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}
