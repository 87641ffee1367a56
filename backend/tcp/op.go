package tcp

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
)

// op is one posted work request split into chunks. Ops are reused: an
// op is recycled only after it completed without error, when no
// connection holds any of its chunks (chunks that failed may still sit in
// a connection's table, so their op is left to the garbage collector).
// A request's first op comes from the pool and goes back to it, and the
// request is marked (postedOnce in its Scratch); from its second post on,
// a request keeps its op (backend.WorkRequest's Scratch) for the next
// post, with no pool's cost. So a poster that re-posts its requests (a
// verbs program, a completion queue's ring) takes nothing from the pool,
// and one that posts each request once (the one-shot verbs, the host
// agent) still allocates nothing.
type op struct {
	wr        *backend.WorkRequest
	remaining atomic.Int32 // chunks not yet settled; only where there are several
	// settled: a race build's check that a single chunk's op is settled
	// once (settle), the count's net where there is none.
	settled  atomic.Bool
	firstErr atomic.Pointer[error]
	r        *route
	one      [1]chunk // the chunk of a single-chunk op
	chunks   []chunk  // the op's chunks (one[:] or allocated)
	// fenceEpoch is 1 + the fence epoch a WRITE or atomic counts in, 0
	// if none (fence.go); set at Post, cleared by fenceDone.
	fenceEpoch uint64
}

var opPool = sync.Pool{New: func() any { return new(op) }}

// postedOnce, in a work request's Scratch, says its first op went back to
// the pool: its next post keeps the op it takes.
var postedOnce = new(op)

// Chunk states; transitions are made under clientConn.mu. A chunk moves
//
//	queued -> sending (WRITE) or sent (READ)    the writer claims it
//	sending -> sent                             its payload went out (markSent)
//	sending -> answered                         a WRITE answered before markSent
//	sent -> receiving                           the reader reads its READ payload
//	queued/sent -> abandoned                    deadline or cancel (cancel.go)
//
// and is finished (settled: its op's count taken, where it has several
// chunks) exactly once, by whichever loop or canceller last touched its
// memory.
const (
	stQueued    = iota // on the ring, not yet written
	stSending          // writer is writing it
	stSent             // written, awaiting response
	stReceiving        // reader is reading its payload
	stAbandoned        // deadline passed; response (if any) is discarded
	stAnswered         // WRITE answered while the writer still sends it; markSent completes it
)

// chunk is one frame's worth of an op.
type chunk struct {
	op       *op
	wop      byte   // the frame's wire op
	id       uint64 // slot and generation (slots.go)
	next     *chunk // links a chain being queued (enqueue)
	local    []byte
	region   uint64
	offset   uint64
	deadline time.Time
	state    int
	wire     int   // the frame's bytes once written, until it leaves the slot table
	answer   error // the response's outcome, for stAnswered
	// iovAt is the index of its loaned payload in its batch's iov, as
	// gathered (clientConn.iovLen), while it is sending; under wmu.
	iovAt int
	// trailer ends the frame of a write-imm or send: commit, or abort
	// once the writer swapped the rest of the payload for zeros (unloan).
	trailer [trailerSize]byte
	// cause is why the chunk is being ended early; interrupted says a loop
	// touching its memory was interrupted (a socket deadline set to now)
	// and must end it. Both under clientConn.mu; stop mirrors interrupted
	// for the reader's lock-free check between reads.
	cause       error
	interrupted bool
	stop        atomic.Bool
}

// pingChunk is queued by the watchdog to send a heartbeat.
var pingChunk = new(chunk)

// newOp takes an op from the pool and splits wr into its count chunks
// (chunkCount): pieces of at most the route's chunk size; one for a send
// or an atomic. A write-imm's pieces are plain writes but the last, which
// carries the immediate value and names the whole range for the event.
func newOp(r *route, wr *backend.WorkRequest, count int) *op {
	o, _ := wr.Scratch.(*op)
	if o == nil || o == postedOnce {
		again := o == postedOnce
		o = opPool.Get().(*op)
		if again { // posted before: it keeps this one
			wr.Scratch = o
		}
	}
	o.wr, o.r = wr, r
	o.fenceEpoch = 0              // fenceCount or fenceCountChain sets it; fenceHold is not on every path
	if o.firstErr.Load() != nil { // a locked store only where the last use failed
		o.firstErr.Store(nil)
	}
	if count > 1 { // a single chunk's op needs no count (settle)
		o.remaining.Store(int32(count))
	} else if raceEnabled {
		o.settled.Store(false)
	}
	if count == 1 {
		o.chunks = o.one[:]
	} else {
		o.chunks = make([]chunk, count)
	}
	n := uint64(len(wr.Local))
	step := r.chunkN
	if count == 1 {
		step = max(n, 1)
	}
	last := wireOp(wr.Op)
	for i := range o.chunks {
		off := uint64(i) * step
		end := min(off+step, n)
		c := &o.chunks[i]
		c.op, c.wop = o, last
		if last == opWriteImm && i < count-1 {
			c.wop = opWrite
		}
		c.local = wr.Local[off:end:end]
		c.region = wr.Remote.Region
		c.offset = wr.Remote.Offset + off
		if last == opSend { // no remote buffer
			c.region, c.offset = 0, 0
		}
		c.deadline = wr.Deadline
		c.answer, c.cause, c.interrupted, c.wire = nil, nil, false, 0
		if c.stop.Load() { // a locked store only where the last use stopped
			c.stop.Store(false)
		}
		c.next = nil
	}
	return o
}

// finish records a chunk's outcome; the last chunk completes the op. Called
// only once neither loop of the chunk's connection can touch its memory.
func (c *chunk) finish(err error) {
	c.op.r.sem.release(1)
	c.end(err)
}

// end is finish less giving back the chunk's room in flight, which the
// caller did (for a batch at once).
func (c *chunk) end(err error) {
	o := c.settle(err)
	if o == nil {
		return
	}
	if o.fenceEpoch != 0 {
		o.r.fenceDone(o) // fence.go: may release notices held behind o
	}
	o.complete()
}

// settle records a chunk's outcome and returns its op when the chunk was
// the op's last to end (exactly once per op), else nil. The caller then
// tells the fence (fenceDone, fenceDoneAll) and completes the op.
func (c *chunk) settle(err error) *op {
	o := c.op
	if err != nil {
		e := err // only a failure pays for the pointer
		o.firstErr.CompareAndSwap(nil, &e)
	}
	if len(o.chunks) > 1 { // read before the count: the last chunk may recycle o
		if o.remaining.Add(-1) != 0 {
			return nil
		}
	} else if raceEnabled && o.settled.Swap(true) {
		panic("tcp: a chunk finished twice")
	}
	return o
}

// complete reports an op whose chunks have all ended and which the fence
// no longer counts, and recycles it when it succeeded.
func (o *op) complete() {
	wr, final := o.end()
	wr.Done.Complete(wr, final)
}

// end is complete less the report: the route's count of the op, and the
// op recycled when it succeeded (failed, it may still be in a table). It
// returns the request and its outcome, for the caller to report: nothing
// of the op touches memory any more.
func (o *op) end() (*backend.WorkRequest, error) {
	r := o.r
	wr, final := o.endUncounted()
	r.End(wr, final)
	return wr, final
}

// endUncounted is end less the route's count, which the caller makes
// (routestate.Tally) before it reports the op.
func (o *op) endUncounted() (*backend.WorkRequest, error) {
	wr := o.wr
	var final error
	if p := o.firstErr.Load(); p != nil {
		final = *p
	}
	if final == nil {
		o.recycle()
		if wr.Scratch != o { // a first post's: back to the pool, the next one keeps its op
			if wr.Scratch == nil {
				wr.Scratch = postedOnce
			}
			opPool.Put(o)
		}
	} else if wr.Scratch == o {
		wr.Scratch = nil // a failed chunk may still be in a table: not reused
	}
	return wr, final
}

// recycle readies a successfully completed op for its next use (its
// request's next post, or the pool), holding no memory.
func (o *op) recycle() {
	for i := range o.chunks {
		c := &o.chunks[i]
		c.op, c.local, c.answer = nil, nil, nil
	}
	o.wr, o.r, o.chunks = nil, nil, nil // an allocated chunk slice is not kept
}
