package tcp

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
)

// The initiator's connections. Each connection of a route runs a writer
// (client_write.go) and a reader (client_read.go); the chunks they carry
// move through the states of op.go, and cancel.go ends them early.

const (
	// maxWriteBatch bounds the frames a writer gathers into one writev.
	maxWriteBatch = 64
	maxBatchBytes = 4 << 20

	// yieldInFlight is the number of operations in flight on a route from
	// which the writer yields before gathering a batch: with many posters
	// the batch grows (fewer syscalls); with few, the yield only adds a
	// round of scheduling.
	yieldInFlight = 8

	// sendQueue bounds a connection's queue of frames; a full queue is
	// back-pressure on Post (the route's semaphore bounds the total anyway).
	sendQueue = 128

	// inlineMax is the largest chunk a poster writes itself when the
	// connection has nothing queued (client_write.go): a larger one goes
	// to the writer goroutine, so Post does not wait for its bytes.
	inlineMax = 64 << 10
)

// clientConn is one connection of a route: a writer and a reader goroutine.
type clientConn struct {
	r     *route
	c     net.Conn
	sendq chan *chunk

	heard atomic.Uint64 // responses read; the heartbeat watches it move
	// lastHeard and lastHeardAt are owned by the watchdog.
	lastHeard   uint64
	lastHeardAt time.Time

	mu      sync.Mutex // guards slots, failing and chunk states
	slots   slotTable
	failing bool

	// wmu is held by whoever writes: the writer goroutine, or a poster
	// writing its own small frame (client_write.go). It guards the
	// writer scratch below.
	wmu sync.Mutex
	// queued counts the chunks put in sendq and not yet taken by a writer
	// under wmu: a poster writes its frame itself only when it is 0, so
	// frames keep their posting order.
	queued  atomic.Int32
	inlined atomic.Uint64 // frames written by their poster (tests read it)

	// writer scratch, under wmu
	hdrs   [maxWriteBatch][reqMaxSize]byte
	iov    net.Buffers // the batch; WriteTo consumes it
	iovBuf net.Buffers // iov's backing array, kept across batches
	// sending holds the WRITE chunks of the batch being written. They stay
	// live until markSent: their answer waits for it (stAnswered), and the
	// watchdog treats them as stuck rather than completing them.
	sending []*chunk
}

func newClientConn(r *route, c net.Conn, queue int) *clientConn {
	return &clientConn{r: r, c: c, sendq: make(chan *chunk, queue), lastHeardAt: time.Now()}
}

// enqueue gives c an id and queues it for the writer; on a connection
// that is failing it finishes c with the route's error.
func (cc *clientConn) enqueue(c *chunk) {
	cc.mu.Lock()
	if cc.failing {
		cc.mu.Unlock()
		c.finish(cc.r.Err())
		return
	}
	c.id = cc.slots.put(c)
	c.state = stQueued
	cc.mu.Unlock()
	if cc.writeInline(c) {
		return
	}
	cc.queued.Add(1)
	select {
	case cc.sendq <- c: // the common case, without a select's cost
		return
	default:
	}
	select {
	case cc.sendq <- c:
	case <-cc.r.Done():
		// The writer is gone; the chunk is in slots and drain fails it.
		cc.queued.Add(-1)
	}
}

// push queues a frame for the writer unless the queue is full, and
// reports whether it did.
func (cc *clientConn) push(c *chunk) bool {
	cc.queued.Add(1)
	select {
	case cc.sendq <- c:
		return true
	default:
		cc.queued.Add(-1)
		return false
	}
}

// expire ends chunks past their deadline with ErrDeadline, as a cancel
// does: only those chunks, never the route.
func (cc *clientConn) expire(now time.Time) {
	cc.endChunks(func(c *chunk) error {
		if c.deadline.IsZero() || !now.After(c.deadline) {
			return nil
		}
		return fmt.Errorf("tcp: %s of %d bytes: %w", c.op.wr.Op, len(c.local), rdmamgr.ErrDeadline)
	})
}

// failAll fails every chunk still held; called after both loops exited.
func (cc *clientConn) failAll(err error) {
	if err == nil {
		err = rdmamgr.ErrClosed
	}
	cc.mu.Lock()
	cc.failing = true
	var left []*chunk
	for _, c := range cc.slots.chunks {
		if c == nil {
			continue
		}
		cc.slots.del(c.id)
		if c.state != stAbandoned {
			left = append(left, c)
		}
	}
	cc.mu.Unlock()
	// Chunks still in sendq were in slots too; drop the queue.
	for {
		select {
		case <-cc.sendq:
			continue
		default:
		}
		break
	}
	for _, c := range left {
		c.finish(err)
	}
}
