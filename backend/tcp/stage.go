package tcp

import (
	"errors"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Serving WRITEs and READs of device memory (memreg device regions,
// GPU buffers): the payload is staged through pinned host buffers in a
// pipeline (cuda.Stager): a WRITE's next chunk is read from the socket
// while the previous one is copied to the device; a READ's next chunk is
// copied from the device while the current one is written to the socket.
// No copy is in flight once the frame is answered, so the region's
// reference is released only when nothing touches its memory.

// stageState is the backend's staging buffers, made on first use. Pinned
// memory is bounded over every connection of the backend (cuda.Stagers):
// at most maxOut pairs of staging buffers are out at once (a device
// WRITE or READ waits up to wait for one, then is refused with ErrLimit:
// a WRITE's payload is drained, the connection stays in step), and at
// most maxIdle per device context are kept idle, the rest freed as their
// operation ends.
type stageState struct {
	mu      sync.Mutex
	stagers *cuda.Stagers
	closed  bool

	// The bounds; zero: the defaults (tests set them before first use).
	maxOut, maxIdle int
	wait            time.Duration
}

// stageWait is the longest a device operation waits for a staging
// buffer pair when maxOut are out (FrameTimeout if shorter). The
// region's reference is held meanwhile, so Revoke and Release wait at
// most this long more.
const stageWait = 100 * time.Millisecond

// get returns a Stager for span's context, waiting up to the bounded wait
// (at most frame) for one.
func (st *stageState) get(span memreg.DeviceSpan, frame time.Duration) (*cuda.Stager, error) {
	st.mu.Lock()
	if st.stagers == nil && !st.closed {
		st.stagers = cuda.NewStagers(cuda.StageChunk, st.maxOut, st.maxIdle)
	}
	p := st.stagers
	wait := st.wait
	st.mu.Unlock()
	if p == nil {
		return nil, errStagingClosed
	}
	if wait == 0 {
		wait = stageWait
	}
	return p.Get(span.Driver, span.Ctx, min(wait, frame))
}

func (st *stageState) put(s *cuda.Stager) {
	st.mu.Lock()
	p := st.stagers
	st.mu.Unlock()
	if p != nil {
		p.Put(s)
	} else {
		s.Close()
	}
}

// close frees the staging buffers (those still out when they come back).
func (st *stageState) close() {
	st.mu.Lock()
	p := st.stagers
	st.closed = true
	st.mu.Unlock()
	if p != nil {
		p.Close()
	}
}

var errStagingClosed = errors.New("tcp: staging closed")

// errCut ends an Upload whose region was cut mid-payload.
var errCut = errors.New("tcp: region cut")

// acquireRW is acquire for a WRITE or a READ: a frame for the peer's own
// memory (no via, no origin) may name a device region too.
func (s *serverConn) acquireRW(h *reqHeader, off, n uint64, need byte) (memreg.Ref, error) {
	if h.via == 0 && h.origin == 0 {
		return s.b.reg.AcquireRemoteAny(h.region, h.key, off, n, opOf(need).Need())
	}
	return s.acquire(h, off, n, opOf(need).Need())
}

// writeDevice reads a WRITE's payload into device memory span, which ref
// admitted, through staging, and releases ref. Like write, it returns a
// non-zero code when the payload could not land (access cut, a device
// copy failed: the rest is drained, the stream stays in step), and an
// error for a failure of the connection.
func (s *serverConn) writeDevice(br *connReader, ref memreg.Ref, span memreg.DeviceSpan) (byte, error) {
	defer ref.Release()
	n := int64(span.Len)
	frameEnd := time.Now().Add(s.b.cfg.FrameTimeout)
	if len(s.segs) > 0 { // no READ reference or answer waits on this payload
		if err := s.flush(); err != nil {
			return 0, err
		}
	}
	stg, err := s.b.stage.get(span, s.b.cfg.FrameTimeout)
	if err != nil {
		ref.Release() // before draining: a peer that stalls its payload holds no cut
		s.rejected()
		return byte(backend.RemoteCode(err)), s.discard(br, n, frameEnd)
	}
	defer s.b.stage.put(stg)
	var read int64
	var cause, connErr error
	err = stg.Upload(span.Ptr, span.Len, func(p []byte) error {
		k, c, e := s.readInto(br, ref.Region(), p, frameEnd)
		read += int64(k)
		switch {
		case e != nil:
			connErr = e
			return e
		case c != nil:
			cause = c
			return errCut
		}
		return nil
	})
	if connErr != nil {
		return 0, connErr
	}
	ref.Release() // every copy finished (Upload's contract): let a cut region go
	if err != nil {
		s.rejected()
		if cause == nil {
			cause = err // a device copy failed
		}
		if derr := s.discard(br, n-read, frameEnd); derr != nil {
			return 0, derr
		}
	}
	if err := s.c.SetReadDeadline(time.Time{}); err != nil {
		return 0, err
	}
	if cause != nil {
		return byte(backend.RemoteCode(cause)), nil
	}
	return 0, nil
}

// readDevice answers a READ of device memory span, which ref admitted:
// the batch so far goes out, then the answer's header and the payload
// staged chunk by chunk, under FrameTimeout (shortened by a cut, as a
// batch's; one cut before the header leaves is answered with the cut's
// code: refuseCutLocked). ref is released once the last copy finished. A device copy
// that fails after the header left ends the connection (the peer awaits
// the whole payload): its operations fail, none reports success.
func (s *serverConn) readDevice(h *reqHeader, ref memreg.Ref, span memreg.DeviceSpan) error {
	if len(s.segs) > 0 {
		if err := s.flush(); err != nil {
			ref.Release()
			return err
		}
	}
	stg, err := s.b.stage.get(span, s.b.cfg.FrameTimeout)
	if err != nil {
		ref.Release()
		s.rejected()
		s.appendResp(respHeader{op: h.op, code: byte(backend.RemoteCode(err)), wrid: h.wrid}, memreg.Ref{})
		return nil
	}
	defer s.b.stage.put(stg)
	rh := respHeader{op: h.op, length: h.length, wrid: h.wrid}
	s.out = append(s.out[:0], make([]byte, rh.size())...)
	rh.encode(s.out)
	s.mu.Lock()
	s.segs = append(s.segs, respSeg{hdrEnd: len(s.out), ref: ref, n: int(span.Len)}) // for cut: it shortens the deadline
	s.flushing = true
	err = s.c.SetWriteDeadline(time.Now().Add(s.b.cfg.FrameTimeout))
	var drop []memreg.Ref
	if err == nil {
		drop = s.refuseCutLocked() // cut before: the header says so, and no payload follows
	}
	s.mu.Unlock()
	releaseAll(drop)
	if err == nil {
		_, err = s.c.Write(s.out)
	}
	served := s.segs[0].ref.Held()
	if err == nil && served {
		err = stg.Download(span.Ptr, span.Len, func(p []byte) error {
			_, werr := s.c.Write(p)
			return werr
		})
	}
	err = s.endTimedWrite(err)
	if err == nil && served {
		s.servedOut(span.Len, h.first)
		s.publishServed()
	}
	s.release() // drops ref: Download left no copy running
	return err
}
