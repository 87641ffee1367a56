package tcp

import (
	"fmt"
	"runtime"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// writeLoop drains the connection's ring in batches: it gathers queued
// frames (headers and WRITE payloads straight from their regions) and
// writes them with one writev per batch, sleeping on wake when the ring is
// empty. It returns when the route fails, or after failing it when a
// write fails.
func (cc *clientConn) writeLoop() {
	defer cc.r.b.wg.Done()
	defer cc.r.ioWG.Done()
	for {
		cc.mu.Lock()
		for len(cc.pend) == 0 {
			cc.sleeping = true
			cc.mu.Unlock()
			select {
			case <-cc.wake:
			case <-cc.r.Done():
				return
			}
			cc.mu.Lock()
		}
		n := len(cc.pend)
		cc.mu.Unlock()
		if n < yieldInFlight && cc.r.InFlight() >= yieldInFlight {
			// Let posters that are ready to run queue their frames first,
			// so one writev carries many (a syscall per frame otherwise
			// dominates small operations). With nothing else runnable
			// this returns at once.
			runtime.Gosched()
		}
		cc.wmu.Lock()
		answered, ok := cc.send()
		cc.wmu.Unlock()
		finishAll(answered)
		if !ok {
			return
		}
	}
}

// writeInline writes the ring from a poster's goroutine; enqueue calls
// it, with wmu held, when the ring is to go now, holds at most inlineMax
// bytes, at most inlineMax more are written and unanswered (so the
// socket buffers have room for the batch, and the poster does not wait on
// a peer that reads slowly or not at all) and no other writer is at
// work: the batch then costs no hand-off to the writer goroutine, whose
// wake-up can cost a cross-core round trip. Frames queued while it writes are left to the
// writer goroutine, which it wakes. Like the writer, it waits while the
// socket's buffer is full; a cancel or the chunk's deadline interrupts
// that wait as it does the writer's. It releases wmu.
func (cc *clientConn) writeInline() {
	if cc.r.Err() != nil {
		// The chunks stay in slots, queued: drain fails them.
		cc.wmu.Unlock()
		return
	}
	if testHookInline != nil {
		testHookInline(cc)
	}
	nh := cc.gather()
	answered, _ := cc.sendGathered(nh)
	cc.wmu.Unlock()
	cc.inlined.Add(uint64(nh))
	cc.mu.Lock()
	if len(cc.pend) > 0 {
		// Queued behind the batch (their posters found wmu held): the
		// writer goroutine takes them.
		cc.kickLocked()
	}
	cc.mu.Unlock()
	finishAll(answered)
}

// testHookInline, when set by a test, runs in writeInline past its check
// of the route.
var testHookInline func(*clientConn)

// send writes what is on the ring as one batch; called with wmu held.
// It returns the chunks that were answered while being sent, to be
// finished once wmu is let go (a completion may post again), and false
// once the route failed.
func (cc *clientConn) send() ([]*chunk, bool) {
	return cc.sendGathered(cc.gather())
}

// sendGathered writes the batch gather built (nh frames), as send.
func (cc *clientConn) sendGathered(nh int) ([]*chunk, bool) {
	if nh == 0 {
		return nil, true
	}
	if err := cc.writeBatch(); err != nil {
		cc.r.fail(fmt.Errorf("tcp: write: %w: %w", rdmamgr.ErrPeerGone, err))
		return nil, false
	}
	return cc.markSent(), true
}

// frameBytes bounds the bytes of c's frame: its payload and the largest
// header (a ping's is a header). A Get counts its answer's bytes too,
// though its request is a header: counted as a header, a poster writes a
// large Get itself, one writev per Get, and 64 KiB Gets with 16 posters
// ran at 0.8× the writer's batches (tried and reverted, 2026-11-26).
func frameBytes(c *chunk) int { return len(c.local) + reqMaxSize }

func finishAll(cs []*chunk) {
	for _, c := range cs {
		c.finish(c.answer)
	}
}

// gather builds the batch in iov from the front of the ring, up to
// maxWriteBatch frames or maxBatchBytes of payload, under one hold of mu, and returns the number of frames (abandoned chunks are
// skipped). What does not fit stays on the ring for the next batch.
func (cc *clientConn) gather() int {
	cc.iov = cc.iovBuf[:0]
	cc.sending = cc.sending[:0]
	cc.stage.reset()
	nh, bytes := 0, 0
	cc.mu.Lock()
	taken := 0
	for taken < len(cc.pend) && nh < maxWriteBatch && bytes < maxBatchBytes {
		c := cc.pend[taken]
		cc.pendBytes -= frameBytes(c)
		nh, bytes = cc.add(c, nh, bytes)
		taken++
	}
	rest := copy(cc.pend, cc.pend[taken:])
	clear(cc.pend[rest:])
	cc.pend = cc.pend[:rest]
	cc.mu.Unlock()
	cc.iov = cc.stage.cut(cc.iov)
	return nh
}

// add claims c and appends its frame to the batch; called with mu held.
// It returns the batch's frames and payload bytes so far. A WRITE whose
// payload is copied into the stage is sent as far as its memory goes: the
// writev never reads it (unloan has nothing to swap).
func (cc *clientConn) add(c *chunk, nh, bytes int) (int, int) {
	if c == pingChunk {
		h := reqHeader{op: opPing}
		h.encode(cc.stage.take(reqHeaderSize))
		return nh + 1, bytes
	}
	if c.state == stQueued && (c.wop == opWrite || c.wop == opRead) { // claim and encode's common case
		c.encodeRW(cc.stage.take(reqHeaderSize))
		c.wire = frameBytes(c)
		cc.slots.wire += c.wire
		c.state = stSent
		if c.wop == opWrite {
			bytes += len(c.local)
			if !cc.stage.copyIn(c.local) {
				c.state = stSending
				cc.iov = cc.stage.loan(cc.iov, c.local)
				c.iovAt = len(cc.iov) - 1
				cc.sending = append(cc.sending, c)
			}
		}
		return nh + 1, bytes
	}
	h, ok := cc.claim(c)
	if !ok {
		return nh, bytes
	}
	h.encode(cc.stage.take(h.size()))
	c.wire = frameBytes(c)
	cc.slots.wire += c.wire
	if hasPayload(h.op) {
		cc.iov = cc.stage.loan(cc.iov, c.local)
		c.iovAt = len(cc.iov) - 1
		bytes += len(c.local)
		cc.sending = append(cc.sending, c)
	}
	if hasTrailer(h.op) {
		// Its own buffer: unloan may turn it into an abort until the
		// write is over.
		c.trailer[0] = trailerCommit
		cc.iov = cc.stage.loan(cc.iov, c.trailer[:])
	}
	return nh + 1, bytes
}

// writeBatch writes the gathered batch. A write interrupted by a cancel
// goes on with the cancelled payloads swapped for zeros (unloan).
func (cc *clientConn) writeBatch() error {
	cc.iovBuf = cc.iov[:0]
	cc.iovLen = len(cc.iov)
	cc.writevs.Add(1)
	if testHookBatch != nil {
		testHookBatch(cc)
	}
	_, err := writeIOV(cc.c, &cc.iov)
	for err != nil && isTimeout(err) && cc.unloan() {
		// A cancelled WRITE's payload was swapped for zeros (the
		// frame must stay whole); the rest of the batch goes on.
		_, err = writeIOV(cc.c, &cc.iov)
	}
	clear(cc.iovBuf[:cap(cc.iovBuf)])
	return err
}

// testHookBatch, when set by a test, runs as a batch gathered in iov is
// about to be written.
var testHookBatch func(*clientConn)

// claim takes a queued chunk for writing and returns its header; an
// abandoned one is skipped. Called with mu held. A chunk with payload becomes sending (the
// writer reads its memory until markSent); any other becomes sent at
// once, since writing its header touches no local memory.
func (cc *clientConn) claim(c *chunk) (reqHeader, bool) {
	if c.state != stQueued {
		return reqHeader{}, false
	}
	wr := c.op.wr
	h := reqHeader{op: c.wop, via: wr.Via, length: uint32(len(c.local)), wrid: c.id, region: c.region, offset: c.offset, key: wr.Remote.Key}
	h.first = len(c.op.chunks) > 0 && c == &c.op.chunks[0] && (c.wop == opWrite || c.wop == opRead || c.wop == opWriteImm)
	switch c.wop {
	case opWriteImm:
		h.imm, h.total, h.origin = wr.Imm, uint64(len(wr.Local)), wr.Origin
	case opSend:
		h.key, h.hasImm, h.origin = buffer.Key{}, wr.HasImm, wr.Origin
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
