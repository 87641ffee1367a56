package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// devicePair is newPair whose B has a fake CUDA device and a device
// region of n bytes.
func devicePair(t *testing.T, n uint64, cfgB Config) (*pair, *cudafake.World, buffer.Buffer) {
	t.Helper()
	p := newPair(t, Config{}, cfgB)
	w := cudafake.NewWorld(cudafake.Config{})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	p.regB.SetCUDA(d, nil)
	h, err := p.regB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	return p, w, h
}

// deviceBytes reads device region h of reg (zero length if released).
func deviceBytes(t *testing.T, reg *memreg.Registry, h buffer.Buffer) []byte {
	t.Helper()
	ref, err := reg.AcquireLocalAny(&h)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	s, _ := ref.Device()
	out, _ := s.Driver.HostAlloc(s.Ctx, s.Len)
	defer s.Driver.HostFree(s.Ctx, out)
	st, _ := s.Driver.StreamCreate(s.Ctx)
	defer s.Driver.StreamDestroy(s.Ctx, st)
	if err := s.Driver.CopyDtoH(s.Ctx, out, s.Ptr, st); err != nil {
		t.Fatal(err)
	}
	if err := s.Driver.StreamSynchronize(s.Ctx, st); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(out)
}

// A WRITE of device memory whose payload stalls cannot hold a revocation
// or a release: the staging read is cut like a host one, no byte lands
// (the chunk being filled never reaches the device), and the connection
// stays in step.
func TestCutStalledDeviceWrite(t *testing.T) {
	for _, release := range []bool{false, true} {
		p, w, h := devicePair(t, cutRegion, Config{FrameTimeout: 10 * time.Minute})
		h2, mem2 := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
		payload := backendtest.RandomData(t, cutRegion)
		c := authed(t, p.b)
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		stallWrite(t, p.b, c, h, payload)
		want := rdmapb.Code_REVOKED
		if release {
			want = rdmapb.Code_RELEASED
			if err := p.regB.Release(cutCtx(t), h); err != nil {
				t.Fatalf("Release with a stalled device write: %v", err)
			}
		} else if err := p.regB.Revoke(cutCtx(t), h); err != nil {
			t.Fatalf("Revoke with a stalled device write: %v", err)
		}
		finishCut(t, c, payload, nil, nil, want, h2, mem2)
		if !release {
			backendtest.AssertSame(t, "device region after the cut", deviceBytes(t, p.regB, h), make([]byte, cutRegion))
		}
		if st := w.Stats(); st.CopiesHtoD != 0 || st.FailedCopies != 0 {
			t.Fatalf("a copy reached the device after the cut: %+v", st)
		}
	}
}

// A peer that stops reading a large READ of device memory cannot hold a
// revocation: the staged write is cut and the connection closed; the
// revocation returned, so no copy of the region runs any more.
func TestRevokeCutsStalledDeviceRead(t *testing.T) {
	p, w, h := devicePair(t, 8<<20, Config{FrameTimeout: 10 * time.Minute, SocketBuffer: 4096})
	c := authed(t, p.b)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 8 << 20, wrid: 9, region: h.Region, key: h.Key}))
	waitFor(t, "the server to block writing", func() bool { return p.b.stalledIn(h.Region) })
	time.Sleep(50 * time.Millisecond) // let the writes fill the socket
	if err := p.regB.Revoke(cutCtx(t), h); err != nil {
		t.Fatalf("Revoke with a stalled device read: %v", err)
	}
	copies := w.Stats().CopiesDtoH
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not closed after the cut (%d bytes read)", n)
	}
	if n >= respHeaderSize+8<<20 {
		t.Fatalf("the whole READ went out after the revocation")
	}
	if got := w.Stats().CopiesDtoH; got != copies {
		t.Fatalf("%d device copies after Revoke returned", got-copies)
	}
}
