package tcp

import (
	"net"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// aLongTimeAgo is a deadline that has passed: it wakes a blocked Read or
// Write at once.
var aLongTimeAgo = time.Unix(1, 0)

// cutGrace is how long a revocation or release lets a READ payload being
// written to a peer finish before it cuts the connection: long enough for a
// peer that reads (a 1 MiB batch takes well under a millisecond), short
// enough that a stalled one cannot hold the owner.
const cutGrace = 250 * time.Millisecond

// serverConn serves one authenticated connection; used by one goroutine,
// and by cutRegion through cut.
//
// Responses are batched: while more requests are already buffered, response
// headers and READ payloads (still in their regions, referenced) accumulate
// and go out in one writev when the input runs dry or the batch is full.
type serverConn struct {
	b       *Backend
	c       net.Conn
	peer    *peerCounters // the peer manager's counters (peers.go)
	tally   servedTally   // counted, not yet in peer's and the backend's: serve's alone
	peerID  uint64        // the peer manager (events and messages name it)
	out     []byte        // response headers of the batch
	segs    []respSeg     // the batch, in order
	payload int           // READ payload bytes in the batch
	iov     net.Buffers   // the batch for writev; WriteTo consumes it
	iovBuf  net.Buffers   // iov's backing array, kept across batches
	// stage: the batch's small READ payloads copied in with the headers
	// around them (flush; allocated at the first, never grown).
	stage []byte

	via  viaState  // frames for an attached process (via.go)
	keep keepAlive // ping answers while a Resolve waits (via_keep.go)
	// peerAgent: the connection is of a host agent's route, whose frames
	// may name an origin (via.go).
	peerAgent bool

	late lateAnswers // answers an agent's inbox gives later (late.go)
	// idleAt: the coarse clock's reading when readHeader last set the
	// idle read deadline, 0 when another deadline (or none) may have
	// replaced it since (idleDeadline). The serve goroutine's alone.
	idleAt int64

	mu sync.Mutex // guards writing and flushing, and segs while flushing
	// writing is the region a WRITE payload is being read into (nil
	// between payloads); the read deadline is set under mu while it is.
	writing *memreg.Region
	// flushing: the batch is being written (the write deadline is set
	// under mu while it is).
	flushing bool
	// cutEnd: while flushing, how many of the batch's bytes must leave
	// before every READ cut meanwhile has its payload out (0: none cut).
	cutEnd int
	// evicted: closed to make room for another peer (guarded by
	// Backend.mu; makeRoomLocked).
	evicted bool
}

// cut wakes the connection's goroutine if it is blocked in r's memory.
// Called with b.mu held.
func (s *serverConn) cut(r *memreg.Region) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writing == r {
		// The reader checks RemoteErr after every wake-up: a lease that
		// was only renewed costs one more round of the loop.
		_ = s.c.SetReadDeadline(aLongTimeAgo)
	}
	// A READ admitted before its lease ran out may finish; one whose
	// region was revoked or is being released may not wait long for a
	// peer that stopped reading: a peer that reads gets the rest within
	// cutGrace, else the write fails and the connection closes.
	// (Once that READ's bytes are out the write goes on: cutLeft.)
	if e := s.b.reg.RemoteErr(r); s.flushing && e != nil && e != rdmamgr.ErrExpired {
		end, pay := 0, 0
		for _, g := range s.segs {
			pay += g.n
			if g.ref.Region() == r {
				end = g.hdrEnd + pay // the batch's bytes up to the end of g's payload
			}
		}
		if end > 0 {
			s.cutEnd = max(s.cutEnd, end)
			_ = s.c.SetWriteDeadline(time.Now().Add(cutGrace))
		}
	}
}

// respSeg is one response of a batch: out[hdrEnd-respHeaderSize:hdrEnd],
// then (READ only) the memory of ref, released once written.
type respSeg struct {
	hdrEnd int
	ref    memreg.Ref
	// n is the payload's length in the batch's stream: len(ref.Bytes())
	// when added, 0 once refuseCutLocked answered it without one (not when
	// cutLeft let ref go early: its bytes are in the stream).
	n     int
	first bool // the first frame of its READ (servedOut)
}

const (
	maxBatchSegs    = 64
	maxBatchPayload = 1 << 20
)

func (s *serverConn) serve() error {
	defer s.publishServed() // at the very end: whatever was counted and not yet published
	defer s.release()
	defer s.endVia()
	defer s.closeLate()
	br := newConnReader(answerFirst{s})
	defer br.close()
	var hdr [reqMaxSize]byte
	var h reqHeader
	maxLen := uint32(s.b.cfg.MaxFrameLen)
	for {
		s.takeLate() // answers a host agent's inbox gave since (late.go)
		if len(s.segs) > 0 && (br.Buffered() == 0 || len(s.segs) >= maxBatchSegs || s.payload >= maxBatchPayload) {
			if err := s.flush(); err != nil {
				return err
			}
		}
		if err := s.readHeader(br, hdr[:reqHeaderSize]); err != nil { // late.go
			return err
		}
		n := reqSizeOf(hdr[0], hdr[1])
		if n > reqHeaderSize {
			if _, err := br.ReadFull(hdr[reqHeaderSize:n]); err != nil {
				return err
			}
		}
		if err := h.decode(hdr[:n], maxLen); err != nil {
			s.rejected()
			return err
		}
		var err error
		switch h.op {
		case opPing:
			s.appendResp(respHeader{op: opPing, wrid: h.wrid}, memreg.Ref{})
		case opWrite, opRead:
			err = s.serveRW(br, &h)
		case opWriteImm:
			err = s.serveWriteImm(br, &h) // server_verbs.go
		case opSend:
			err = s.serveSend(br, &h)
		default:
			s.serveAtomic(&h)
		}
		if !keepsIdleDeadline(h.op) {
			s.idleAt = 0
		}
		if err == nil {
			err = s.via.err // a flush before a Resolve failed
		}
		if err != nil {
			return err
		}
	}
}

// appendResp adds a response to the batch; ref, for a READ, holds its
// payload and is released once the batch is written.
func (s *serverConn) appendResp(h respHeader, ref memreg.Ref) {
	at := len(s.out)
	s.out = append(s.out, make([]byte, h.size())...)
	h.encode(s.out[at:])
	n := len(ref.Bytes())
	s.segs = append(s.segs, respSeg{hdrEnd: len(s.out), ref: ref, n: n})
	s.payload += n
}

// endTimedWrite ends a write made under a deadline (a READ's answer):
// flushing is cleared and so is the deadline, under mu, so that neither a
// later cut (which shortens it only while flushing) nor the deadline
// itself outlives the write. A batch of answers alone is written without
// one; before, it inherited the last READ's (FrameTimeout, or cutGrace
// after a cut) and, written after that passed, failed with "i/o timeout",
// closing the connection and failing every operation on it
// (TestNoStaleWriteDeadline). It returns err, or the deadline's error.
func (s *serverConn) endTimedWrite(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushing, s.cutEnd = false, 0
	if derr := s.c.SetWriteDeadline(time.Time{}); err == nil {
		err = derr
	}
	return err
}

// release drops the references of the batch and empties it.
func (s *serverConn) release() {
	for i := range s.segs {
		s.segs[i].ref.Release()
		s.segs[i] = respSeg{}
	}
	s.segs = s.segs[:0]
	s.out = s.out[:0]
	s.payload = 0
	clear(s.iovBuf[:cap(s.iovBuf)])
}
