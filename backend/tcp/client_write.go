package tcp

import (
	"fmt"
	"runtime"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// writeLoop gathers queued frames (headers and WRITE payloads straight from
// their regions) and writes them with one writev per batch. It returns when
// the route fails, or after failing it when a write fails.
func (cc *clientConn) writeLoop() {
	defer cc.r.b.wg.Done()
	defer cc.r.ioWG.Done()
	for {
		var c *chunk
		select {
		case c = <-cc.sendq:
		case <-cc.r.Done():
			return
		}
		if len(cc.sendq) == 0 && cc.r.InFlight() >= yieldInFlight {
			// Let posters that are ready to run queue their frames first,
			// so one writev carries many (a syscall per frame otherwise
			// dominates small operations). With nothing else runnable
			// this returns at once.
			runtime.Gosched()
		}
		cc.wmu.Lock()
		cc.queued.Add(-1)
		answered, ok := cc.send(c)
		cc.wmu.Unlock()
		finishAll(answered)
		if !ok {
			return
		}
	}
}

// writeInline writes c's frame from the poster's goroutine when c is
// small, its operation is the only one in flight on the route, nothing is
// queued and no other writer is at work: a one-at-a-time operation then
// costs no hand-off to the writer goroutine, whose wake-up can cost a
// cross-core round trip. With more in flight the writer goroutine gathers
// the frames of many posters into one writev instead. It reports whether
// it wrote c. Like the writer, it waits while the socket's buffer is full;
// a cancel or the chunk's deadline interrupts that wait as it does the
// writer's.
func (cc *clientConn) writeInline(c *chunk) bool {
	if len(c.local) > inlineMax || cc.r.InFlight() > 1 || cc.queued.Load() != 0 || !cc.wmu.TryLock() {
		return false
	}
	if cc.queued.Load() != 0 || cc.r.Err() != nil {
		cc.wmu.Unlock()
		return false
	}
	answered, _ := cc.send(c)
	cc.wmu.Unlock()
	cc.inlined.Add(1)
	finishAll(answered)
	return true
}

// send writes c and what is queued behind it as one batch; called with
// wmu held. It returns the chunks that were answered while being sent, to
// be finished once wmu is let go (a completion may post again), and false
// once the route failed.
func (cc *clientConn) send(c *chunk) ([]*chunk, bool) {
	if cc.gather(c) == 0 {
		return nil, true
	}
	if err := cc.writeBatch(); err != nil {
		cc.r.fail(fmt.Errorf("tcp: write: %w: %w", rdmamgr.ErrPeerGone, err))
		return nil, false
	}
	return cc.markSent(), true
}

func finishAll(cs []*chunk) {
	for _, c := range cs {
		c.finish(c.answer)
	}
}

// gather builds the batch in iov from c and whatever else is queued now,
// up to maxWriteBatch frames or maxBatchBytes of payload, and returns the
// number of frames (abandoned chunks are skipped).
func (cc *clientConn) gather(c *chunk) int {
	cc.iov = cc.iovBuf[:0]
	cc.sending = cc.sending[:0]
	nh, bytes := 0, 0
	for {
		if c == pingChunk {
			h := reqHeader{op: opPing}
			h.encode(cc.hdrs[nh][:reqHeaderSize])
			cc.iov = append(cc.iov, cc.hdrs[nh][:reqHeaderSize])
			nh++
		} else if h, ok := cc.claim(c); ok {
			hb := cc.hdrs[nh][:h.size()]
			h.encode(hb)
			cc.iov = append(cc.iov, hb)
			nh++
			if hasPayload(h.op) {
				cc.iov = append(cc.iov, c.local)
				bytes += len(c.local)
				cc.sending = append(cc.sending, c)
			}
			if hasTrailer(h.op) {
				c.trailer[0] = trailerCommit
				cc.iov = append(cc.iov, c.trailer[:])
			}
		}
		if nh == maxWriteBatch || bytes >= maxBatchBytes {
			return nh
		}
		select {
		case c = <-cc.sendq:
			cc.queued.Add(-1)
			continue
		default:
		}
		return nh
	}
}

// writeBatch writes the gathered batch. A write interrupted by a cancel
// goes on with the cancelled payloads swapped for zeros (unloan).
func (cc *clientConn) writeBatch() error {
	cc.iovBuf = cc.iov[:0]
	_, err := cc.iov.WriteTo(cc.c)
	for err != nil && isTimeout(err) && cc.unloan() {
		// A cancelled WRITE's payload was swapped for zeros (the
		// frame must stay whole); the rest of the batch goes on.
		_, err = cc.iov.WriteTo(cc.c)
	}
	clear(cc.iovBuf[:cap(cc.iovBuf)])
	return err
}

// claim takes a queued chunk for writing and returns its header; an
// abandoned one is skipped. A chunk with payload becomes sending (the
// writer reads its memory until markSent); any other becomes sent at
// once, since writing its header touches no local memory.
func (cc *clientConn) claim(c *chunk) (reqHeader, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if c.state != stQueued {
		return reqHeader{}, false
	}
	wr := c.op.wr
	h := reqHeader{op: c.wop, length: uint32(len(c.local)), wrid: c.id, region: c.region, offset: c.offset, key: wr.Remote.Key}
	h.first = len(c.op.chunks) > 0 && c == &c.op.chunks[0] && (c.wop == opWrite || c.wop == opRead || c.wop == opWriteImm)
	switch c.wop {
	case opWriteImm:
		h.imm, h.total = wr.Imm, uint64(len(wr.Local))
	case opSend:
		h.key, h.hasImm = buffer.Key{}, wr.HasImm
		if wr.HasImm {
			h.imm = wr.Imm
		}
	case opCompareSwap:
		h.length, h.compare, h.swap = 8, wr.Compare, wr.Swap
	case opFetchAdd:
		h.length, h.swap = 8, wr.Swap
	}
	if hasPayload(h.op) {
		c.state = stSending
	} else {
		c.state = stSent
	}
	return h, true
}

// markSent moves the batch's WRITE chunks on once their payload is out:
// to sent, or, when already answered or interrupted, to finished: it
// returns those, for the caller to finish once it let go of wmu.
func (cc *clientConn) markSent() []*chunk {
	var answered []*chunk
	reset := false
	cc.mu.Lock()
	for _, c := range cc.sending {
		if c.interrupted && (c.state == stSending || c.state == stAnswered) {
			// Cancelled after its bytes went out: end it now.
			reset = true
			c.answer = c.cause
			if c.state == stSending {
				c.state = stAbandoned // its response is still to come and be dropped
			} else {
				cc.slots.del(c.id)
			}
			answered = append(answered, c)
			continue
		}
		switch c.state {
		case stSending:
			c.state = stSent
		case stAnswered:
			cc.slots.del(c.id)
			answered = append(answered, c)
		}
	}
	if reset {
		_ = cc.c.SetWriteDeadline(time.Time{})
	}
	cc.mu.Unlock()
	clear(cc.sending)
	return answered
}
