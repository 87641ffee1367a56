package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// pendingRoute is the initiator's route between PrepareRoute and Complete.
type pendingRoute struct {
	b    *Backend
	peer uint64
}

func (p *pendingRoute) Abort() {}

// Complete dials the responder's data address once per token and
// authenticates each connection.
func (p *pendingRoute) Complete(ctx context.Context, info []byte) (backend.Route, error) {
	addr, tokens, err := decodeResponderInfo(info)
	if err != nil {
		return nil, err
	}
	b := p.b
	r := &route{
		b:       b,
		peer:    p.peer,
		sem:     make(chan struct{}, b.cfg.MaxInFlight),
		done:    make(chan struct{}),
		drained: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		chunkN:  uint64(b.cfg.ChunkSize),
	}
	var d net.Dialer
	for i, tok := range tokens {
		c, err := b.dial(ctx, &d, addr) // tls.go
		if err != nil {
			r.closeConns()
			return nil, fmt.Errorf("tcp: dial %s: %w: %w", addr, backend.ErrPeerGone, err)
		}
		if err := hello(ctx, c, tok, b.cfg.Secret); err != nil {
			c.Close()
			r.closeConns()
			return nil, fmt.Errorf("tcp: connection %d to %s: %w", i, addr, err)
		}
		setSockopts(c, b.cfg.SocketBuffer)
		r.conns = append(r.conns, newClientConn(r, c, min(b.cfg.MaxInFlight, sendQueue)))
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		r.closeConns()
		return nil, backend.ErrClosed
	}
	b.routes[r] = struct{}{}
	for _, cc := range r.conns {
		b.conns[cc.c] = struct{}{}
	}
	b.wg.Add(1 + 2*len(r.conns))
	b.mu.Unlock()
	r.ioWG.Add(2 * len(r.conns))
	for _, cc := range r.conns {
		go cc.writeLoop()
		go cc.readLoop()
	}
	go r.watchdog()
	return r, nil
}

func hello(ctx context.Context, c net.Conn, tok [tokenSize]byte, secret backend.Secret) error {
	dl := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.SetDeadline(dl)
	var ch [challengeSize]byte
	if _, err := io.ReadFull(c, ch[:]); err != nil {
		return fmt.Errorf("challenge: %w: %w", backend.ErrPeerGone, err)
	}
	nonce, err := decodeChallenge(ch[:])
	if err != nil {
		return err
	}
	var h [helloSize]byte
	encodeHello(h[:], tok, helloMAC(secret, nonce, tok))
	if _, err := c.Write(h[:]); err != nil {
		return fmt.Errorf("hello: %w: %w", backend.ErrPeerGone, err)
	}
	var ack [helloAckSize]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("hello ack: %w: %w", backend.ErrPeerGone, err)
	}
	code, err := decodeHelloAck(ack[:])
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("hello refused: %w", codeErr(opWrite, code))
	}
	return c.SetDeadline(time.Time{})
}

// route is the initiator's side of a route: N connections, a semaphore of
// in-flight chunks and a watchdog for deadlines and heartbeats.
type route struct {
	b      *Backend
	peer   uint64
	conns  []*clientConn // fixed after Complete
	sem    chan struct{} // one token per chunk in flight
	next   atomic.Uint32 // round-robin start
	chunkN uint64

	ops, bytesPut, bytesGot, errs atomic.Uint64
	inflight                      atomic.Int64

	kick chan struct{} // wakes the watchdog when work is posted

	failOnce sync.Once
	err      atomic.Pointer[error]
	done     chan struct{} // closed by fail
	drained  chan struct{} // closed once every chunk is completed after fail
	ioWG     sync.WaitGroup
	closeMu  sync.Mutex // serialises Close
}

// op is one posted work request split into chunks. Ops are pooled: an op
// is recycled only after it completed without error, when no connection
// holds any of its chunks (chunks that failed may still sit in a
// connection's table, so their op is left to the garbage collector).
type op struct {
	wr        *backend.WorkRequest
	remaining atomic.Int32
	firstErr  atomic.Pointer[error]
	r         *route
	one       [1]chunk // the chunk of a single-chunk op
	chunks    []chunk  // the op's chunks (one[:] or allocated)
}

var opPool = sync.Pool{New: func() any { return new(op) }}

// Chunk states; transitions are made under clientConn.mu.
const (
	stQueued    = iota // in sendq, not yet written
	stSending          // writer is writing it
	stSent             // written, awaiting response
	stReceiving        // reader is reading its payload
	stAbandoned        // deadline passed; response (if any) is discarded
	stAnswered         // WRITE answered while the writer still sends it; markSent completes it
)

// chunk is one frame's worth of an op.
type chunk struct {
	op       *op
	id       uint64
	local    []byte
	region   uint64
	offset   uint64
	deadline time.Time
	state    int
	answer   error // the response's outcome, for stAnswered
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

func (r *route) Done() <-chan struct{} { return r.done }

func (r *route) Err() error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *route) Stats() backend.RouteStats {
	return backend.RouteStats{
		Ops:      r.ops.Load(),
		BytesPut: r.bytesPut.Load(),
		BytesGot: r.bytesGot.Load(),
		Errors:   r.errs.Load(),
		InFlight: int(r.inflight.Load()),
	}
}

// Post splits wr into chunks and queues them round-robin on the connections.
func (r *route) Post(wr *backend.WorkRequest) error {
	n := uint64(len(wr.Local))
	if n == 0 || n != wr.Remote.Length {
		return fmt.Errorf("tcp: local %d bytes, remote %d: %w", n, wr.Remote.Length, backend.ErrProtocol)
	}
	if wr.Op != backend.OpWrite && wr.Op != backend.OpRead {
		return fmt.Errorf("tcp: op %d: %w", wr.Op, backend.ErrProtocol)
	}
	// Chunk offsets are Remote.Offset + i*chunkN: an overflowing range
	// would wrap a later chunk around to a valid low offset.
	if wr.Remote.Offset+n < wr.Remote.Offset {
		return fmt.Errorf("tcp: remote offset %d + %d bytes overflows: %w", wr.Remote.Offset, n, buffer.ErrOutOfRange)
	}
	if err := r.Err(); err != nil {
		return err
	}
	count := (n + r.chunkN - 1) / r.chunkN
	if count > uint64(cap(r.sem)) {
		return fmt.Errorf("tcp: %d-byte operation needs %d chunks, limit %d: %w", n, count, cap(r.sem), backend.ErrLimit)
	}
	// Reserve every chunk's slot first, so a partly posted op never waits
	// on itself.
	var timer *time.Timer
	for i := uint64(0); i < count; i++ {
		select {
		case r.sem <- struct{}{}:
			continue
		default:
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(wr.Deadline))
			defer timer.Stop()
		}
		select {
		case r.sem <- struct{}{}:
		case <-timer.C:
			r.releaseSem(int(i))
			return fmt.Errorf("tcp: waiting for room in flight: %w", backend.ErrDeadline)
		case <-r.done:
			r.releaseSem(int(i))
			return r.Err()
		case <-wr.Cancel:
			r.releaseSem(int(i))
			return fmt.Errorf("tcp: waiting for room in flight: %w", errCanceledWait)
		}
	}
	o := opPool.Get().(*op)
	o.wr, o.r = wr, r
	o.firstErr.Store(nil)
	o.remaining.Store(int32(count))
	if count == 1 {
		o.chunks = o.one[:]
	} else {
		o.chunks = make([]chunk, count)
	}
	wasIdle := r.inflight.Add(1) == 1
	start := int(r.next.Add(1))
	for i := range o.chunks {
		off := uint64(i) * r.chunkN
		end := min(off+r.chunkN, n)
		c := &o.chunks[i]
		c.op = o
		c.local = wr.Local[off:end:end]
		c.region = wr.Remote.Region
		c.offset = wr.Remote.Offset + off
		c.deadline = wr.Deadline
		c.answer, c.cause, c.interrupted = nil, nil, false
		c.stop.Store(false)
		r.conns[(start+i)%len(r.conns)].enqueue(c)
	}
	if wr.CancelCause() != nil { // cancelled while it was being queued
		r.Cancel(wr)
	}
	if wasIdle { // only an idle watchdog sleeps past its tick
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

func (r *route) releaseSem(n int) {
	for range n {
		<-r.sem
	}
}

// finish records a chunk's outcome; the last chunk completes the op. Called
// only once neither loop of the chunk's connection can touch its memory.
func (c *chunk) finish(err error) {
	o := c.op
	r := o.r
	<-r.sem
	if err != nil {
		e := err // only a failure pays for the pointer
		o.firstErr.CompareAndSwap(nil, &e)
	}
	if o.remaining.Add(-1) != 0 {
		return
	}
	r.inflight.Add(-1)
	wr := o.wr
	var final error
	if p := o.firstErr.Load(); p != nil {
		final = *p
		r.errs.Add(1)
	} else {
		r.ops.Add(1)
		if wr.Op == backend.OpWrite {
			r.bytesPut.Add(uint64(len(wr.Local)))
		} else {
			r.bytesGot.Add(uint64(len(wr.Local)))
		}
		o.recycle()
	}
	wr.Done.Complete(wr, final)
}

// recycle returns a successfully completed op to the pool.
func (o *op) recycle() {
	for i := range o.chunks {
		c := &o.chunks[i]
		c.op, c.local, c.answer = nil, nil, nil
	}
	if len(o.chunks) > 1 {
		return // an allocated chunk slice is not kept
	}
	o.wr, o.r, o.chunks = nil, nil, nil
	opPool.Put(o)
}

// fail marks the route failed and closes its connections; the loops then
// exit and fail what is left.
func (r *route) fail(err error) {
	r.failOnce.Do(func() {
		r.err.Store(&err)
		close(r.done)
		for _, cc := range r.conns {
			cc.c.Close()
		}
	})
}

func (r *route) closeConns() {
	for _, cc := range r.conns {
		cc.c.Close()
	}
}

// Close fails in-flight work with ErrClosed and waits for the route's
// goroutines. Idempotent.
func (r *route) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	r.fail(fmt.Errorf("tcp: route closed: %w", backend.ErrClosed))
	<-r.drained
	r.b.mu.Lock()
	delete(r.b.routes, r)
	r.b.mu.Unlock()
	return nil
}

// watchdog fails chunks whose deadline passed while work is in flight, and
// keeps idle routes alive: a connection that has heard nothing for a
// heartbeat interval sends a ping, and one silent for PeerTimeout fails the
// route with ErrPeerGone.
func (r *route) watchdog() {
	defer r.b.wg.Done()
	cfg := r.b.cfg
	t := time.NewTicker(cfg.WatchdogInterval)
	defer t.Stop()
	idle := time.NewTimer(cfg.HeartbeatInterval)
	defer idle.Stop()
	for {
		if r.inflight.Load() == 0 {
			idle.Reset(cfg.HeartbeatInterval)
			select {
			case <-r.kick:
			case <-idle.C:
				r.heartbeat(time.Now())
			case <-r.done:
				r.drain()
				return
			}
			continue
		}
		select {
		case <-t.C:
		case <-r.done:
			r.drain()
			return
		}
		now := time.Now()
		for _, cc := range r.conns {
			cc.expire(now)
		}
		r.heartbeat(now)
	}
}

// heartbeat pings connections that heard nothing lately and fails the
// route when one stayed silent past PeerTimeout.
func (r *route) heartbeat(now time.Time) {
	cfg := r.b.cfg
	for _, cc := range r.conns {
		heard := cc.heard.Load()
		if heard != cc.lastHeard {
			cc.lastHeard, cc.lastHeardAt = heard, now
			continue
		}
		silent := now.Sub(cc.lastHeardAt)
		if silent >= cfg.PeerTimeout {
			r.fail(fmt.Errorf("tcp: peer silent for %v: %w", silent.Round(time.Millisecond), backend.ErrPeerGone))
			return
		}
		if silent >= cfg.HeartbeatInterval {
			select {
			case cc.sendq <- pingChunk:
			default: // the queue is busy: the writer is alive and so is the traffic
			}
		}
	}
}

// drain waits for the connection loops, then fails whatever is left.
func (r *route) drain() {
	r.ioWG.Wait()
	err := r.Err()
	for _, cc := range r.conns {
		cc.failAll(err)
		cc.r.b.untrackConn(cc.c)
	}
	close(r.drained)
}

// maxWriteBatch bounds the frames a writer gathers into one writev.
const (
	maxWriteBatch = 64
	maxBatchBytes = 4 << 20
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

	mu      sync.Mutex // guards slots, nextID, failing and chunk states
	slots   map[uint64]*chunk
	nextID  uint64
	failing bool

	// writer-owned scratch
	hdrs   [maxWriteBatch][reqHeaderSize]byte
	iov    net.Buffers // the batch; WriteTo consumes it
	iovBuf net.Buffers // iov's backing array, kept across batches
	// sending holds the WRITE chunks of the batch being written. They stay
	// live until markSent: their answer waits for it (stAnswered), and the
	// watchdog treats them as stuck rather than completing them.
	sending []*chunk
}

func newClientConn(r *route, c net.Conn, queue int) *clientConn {
	return &clientConn{r: r, c: c, slots: make(map[uint64]*chunk), sendq: make(chan *chunk, queue), lastHeardAt: time.Now()}
}

func (cc *clientConn) enqueue(c *chunk) {
	cc.mu.Lock()
	if cc.failing {
		cc.mu.Unlock()
		c.finish(cc.r.Err())
		return
	}
	cc.nextID++
	c.id = cc.nextID
	c.state = stQueued
	cc.slots[c.id] = c
	cc.mu.Unlock()
	select {
	case cc.sendq <- c:
	case <-cc.r.done:
		// The writer is gone; the chunk is in slots and drain fails it.
	}
}

// writeLoop gathers queued frames (headers and WRITE payloads straight from
// their regions) and writes them with one writev per batch.
func (cc *clientConn) writeLoop() {
	defer cc.r.b.wg.Done()
	defer cc.r.ioWG.Done()
	for {
		var c *chunk
		select {
		case c = <-cc.sendq:
		case <-cc.r.done:
			return
		}
		if len(cc.sendq) == 0 && cc.r.inflight.Load() >= yieldInFlight {
			// Let posters that are ready to run queue their frames first,
			// so one writev carries many (a syscall per frame otherwise
			// dominates small operations). With nothing else runnable
			// this returns at once.
			runtime.Gosched()
		}
		cc.iov = cc.iovBuf[:0]
		cc.sending = cc.sending[:0]
		nh, bytes := 0, 0
		for {
			if c == pingChunk {
				h := reqHeader{op: opPing}
				h.encode(cc.hdrs[nh][:])
				cc.iov = append(cc.iov, cc.hdrs[nh][:])
				nh++
			} else if h, ok := cc.claim(c); ok {
				h.encode(cc.hdrs[nh][:])
				cc.iov = append(cc.iov, cc.hdrs[nh][:])
				nh++
				if h.op == opWrite {
					cc.iov = append(cc.iov, c.local)
					bytes += len(c.local)
					cc.sending = append(cc.sending, c)
				}
			}
			if nh == maxWriteBatch || bytes >= maxBatchBytes {
				break
			}
			select {
			case c = <-cc.sendq:
				continue
			default:
			}
			break
		}
		if nh == 0 {
			continue
		}
		cc.iovBuf = cc.iov[:0]
		_, err := cc.iov.WriteTo(cc.c)
		for err != nil && isTimeout(err) && cc.unloan() {
			// A cancelled WRITE's payload was swapped for zeros (the
			// frame must stay whole); the rest of the batch goes on.
			_, err = cc.iov.WriteTo(cc.c)
		}
		clear(cc.iovBuf[:cap(cc.iovBuf)])
		if err != nil {
			cc.r.fail(fmt.Errorf("tcp: write: %w: %w", backend.ErrPeerGone, err))
			return
		}
		cc.markSent()
	}
}

// claim takes a queued chunk for writing and returns its header; an
// abandoned one is skipped. A WRITE becomes sending (the writer reads its
// memory until markSent); a READ becomes sent at once, since writing its
// header touches no local memory.
func (cc *clientConn) claim(c *chunk) (reqHeader, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if c.state != stQueued {
		return reqHeader{}, false
	}
	h := reqHeader{op: byte(c.op.wr.Op), length: uint32(len(c.local)), wrid: c.id, region: c.region, offset: c.offset, key: c.op.wr.Remote.Key}
	if h.op == opWrite {
		c.state = stSending
	} else {
		c.state = stSent
	}
	return h, true
}

func (cc *clientConn) markSent() {
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
				delete(cc.slots, c.id)
			}
			answered = append(answered, c)
			continue
		}
		switch c.state {
		case stSending:
			c.state = stSent
		case stAnswered:
			delete(cc.slots, c.id)
			answered = append(answered, c)
		}
	}
	if reset {
		_ = cc.c.SetWriteDeadline(time.Time{})
	}
	cc.mu.Unlock()
	clear(cc.sending)
	for _, c := range answered {
		c.finish(c.answer)
	}
}

// readLoop reads responses and completes chunks; READ payload lands
// straight in the chunk's local memory.
func (cc *clientConn) readLoop() {
	defer cc.r.b.wg.Done()
	defer cc.r.ioWG.Done()
	br := newReader(cc.c, clientReadBuf)
	var hb [respHeaderSize]byte
	var h respHeader
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			if errors.Is(err, net.ErrClosed) {
				cc.r.fail(fmt.Errorf("tcp: connection closed: %w", backend.ErrClosed))
			} else {
				cc.r.fail(fmt.Errorf("tcp: read: %w: %w", backend.ErrPeerGone, err))
			}
			return
		}
		if err := h.decode(hb[:]); err != nil {
			cc.r.fail(err)
			return
		}
		cc.heard.Add(1)
		if h.op == opPing {
			if h.length != 0 || h.code != 0 {
				cc.r.fail(fmt.Errorf("tcp: malformed ping response: %w", backend.ErrProtocol))
				return
			}
			continue
		}
		cc.mu.Lock()
		c := cc.slots[h.wrid]
		// A response for a request not yet sent (queued) or already
		// answered cannot be genuine.
		if c == nil || c.state == stQueued || c.state == stAnswered || byte(c.op.wr.Op) != h.op ||
			(h.length != 0 && h.length != uint32(len(c.local))) ||
			(h.op == opRead && h.code == 0 && h.length == 0) {
			cc.mu.Unlock()
			cc.r.fail(fmt.Errorf("tcp: response for wrid %d does not match: %w", h.wrid, backend.ErrProtocol))
			return
		}
		if c.state == stSending && h.op == opWrite {
			// The writer may still be reading c.local (a peer can answer
			// before it read the payload): it completes the chunk in
			// markSent once its write returned.
			c.state = stAnswered
			if h.code != 0 {
				c.answer = codeErr(h.op, h.code)
			}
			cc.mu.Unlock()
			continue
		}
		abandoned := c.state == stAbandoned
		if h.length > 0 && !abandoned {
			c.state = stReceiving
		}
		if abandoned || h.length == 0 {
			delete(cc.slots, h.wrid)
		}
		cc.mu.Unlock()

		if h.length > 0 {
			var err error
			if abandoned {
				_, err = io.CopyN(io.Discard, br, int64(h.length))
			} else {
				err = cc.readPayload(br, c)
			}
			if err != nil {
				// The chunk stays in slots as receiving; drain fails it
				// after this loop has exited.
				cc.r.fail(fmt.Errorf("tcp: read payload: %w: %w", backend.ErrPeerGone, err))
				return
			}
			continue
		}
		if abandoned {
			continue
		}
		var err error
		if h.code != 0 {
			err = codeErr(h.op, h.code)
		}
		c.finish(err)
	}
}

const clientReadBuf = 4 << 10

// expire ends chunks past their deadline with ErrDeadline, as a cancel
// does: only those chunks, never the route.
func (cc *clientConn) expire(now time.Time) {
	cc.endChunks(func(c *chunk) error {
		if c.deadline.IsZero() || !now.After(c.deadline) {
			return nil
		}
		return fmt.Errorf("tcp: %s of %d bytes: %w", c.op.wr.Op, len(c.local), backend.ErrDeadline)
	})
}

// failAll fails every chunk still held; called after both loops exited.
func (cc *clientConn) failAll(err error) {
	if err == nil {
		err = backend.ErrClosed
	}
	cc.mu.Lock()
	cc.failing = true
	var left []*chunk
	for id, c := range cc.slots {
		delete(cc.slots, id)
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

// yieldInFlight is the number of operations in flight on a route from
// which the writer yields before gathering a batch: with many posters the
// batch grows (fewer syscalls); with few, the yield only adds a round of
// scheduling.
const yieldInFlight = 8

// sendQueue bounds a connection's queue of frames; a full queue is
// back-pressure on Post (the route's semaphore bounds the total anyway).
const sendQueue = 128
