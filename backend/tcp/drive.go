package tcp

import (
	"context"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
)

// The read role. Whoever holds a connection's read role reads its
// answers: the reader goroutine (readLoop), or a waiter (Drive). A waiter
// that reads its own answer is woken by the network poller directly, as a
// plain ping-pong's one goroutine is, where the reader goroutine would
// wake and then hand the answer to it: a second wake-up, of another
// thread where goroutines run on several cores (tens of microseconds on
// a virtual machine), and a read that finds nothing before the reader
// parks again.
//
// The reader parks its role (roleParked: it waits on rwake, nobody reads)
// only while a waiter may want it: some Drive found no role to take on
// the route (wantDrive), and nothing is in flight on the connection (no
// chunk held, no ping unanswered, nothing buffered). The next post then
// lends the role to its operation when that is a single chunk posted
// with backend.WorkRequest.Waited and the connection's only one; any
// other post, a ping, a cancel, a failing route, Undrive (the
// operation's Poll, Done or Err), a wait for room in flight, a notice the
// fence holds and the watchdog (a role lent or parked for a whole tick)
// hand the role back to the reader goroutine. So an operation nobody
// waits for is read within two watchdog ticks, and a route whose
// operations are not waited on alone never parks its readers.
//
// The waiter that takes the role (Drive) reads once into the
// connection's buffer and handles the whole frames there, until its own
// operation has ended. It never blocks in the middle of a frame: a frame
// not whole in the buffer (a large READ payload) goes back to the reader
// goroutine, which reads frames however they come and has no deadline. A
// frame that breaks the protocol fails the route and empties the buffer,
// as readLoop stops there. The waiter's read ends early by a deadline,
// set under mu: now, when a cancel or deadline ends one of the
// connection's chunks (endChunks) or the watchdog finds the waiter's ctx
// ended; its ctx's deadline, once less than two ticks away. It clears
// that deadline (under mu) before it hands the role back.
const (
	roleReader = iota // the reader goroutine reads (or is about to)
	roleParked        // the reader goroutine waits on rwake; nobody reads
	roleDriven        // a waiter reads (drive)
)

var _ backend.Driver = (*route)(nil)

// Drive implements backend.Driver: when wr's connection lent its read
// role to wr, the caller reads the answers until wr has ended (or its
// ctx ended, or a frame is not whole). Otherwise it only notes that a
// waiter wanted the role, so connections park their readers when idle.
func (r *route) Drive(ctx context.Context, wr *backend.WorkRequest) {
	for _, cc := range r.conns {
		if cc.lentTo.Load() == wr {
			cc.drive(ctx, wr)
			return
		}
	}
	if !r.wantDrive.Load() {
		r.wantDrive.Store(true)
	}
}

// Undrive implements backend.Driver: wr will not be waited on by Drive
// (its poster polls it), so a role lent to it goes back to the reader
// goroutine, and connections stop parking their readers.
func (r *route) Undrive(wr *backend.WorkRequest) {
	if r.wantDrive.Load() {
		r.wantDrive.Store(false)
	}
	for _, cc := range r.conns {
		if cc.lentTo.Load() == wr {
			cc.mu.Lock()
			if cc.role == roleParked && cc.lent == wr {
				cc.unparkLocked()
			}
			cc.mu.Unlock()
		}
	}
}

// parkRole parks the reader goroutine's role if a waiter may want it and
// nothing is in flight, and then waits until the role is its again. The
// caller's buffer is empty.
func (cc *clientConn) parkRole() {
	cc.mu.Lock()
	if !cc.idleLocked() {
		cc.mu.Unlock()
		return
	}
	cc.role = roleParked
	cc.parkGen++
	cc.mu.Unlock()
	cc.r.kickWatchdog() // it reclaims a role parked for a whole tick
	<-cc.rwake
}

// kickWatchdog wakes an idle watchdog, which then ticks while a role is
// parked (reclaimStale).
func (r *route) kickWatchdog() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// lendLocked, under mu with the role parked and c just queued, lends the
// role to c's operation when a waiter may take it (a single chunk posted
// as Waited, alone on the connection); else it hands the role back to
// the reader goroutine.
func (cc *clientConn) lendLocked(c *chunk, alone bool) {
	wr := c.op.wr
	if alone && wr.Waited && cc.lent == nil && cc.pings == 0 && len(c.op.chunks) == 1 && cc.slots.held.Load() == 1 {
		cc.lent, cc.lentID = wr, c.id
		cc.lentTo.Store(wr)
		cc.parkGen++
		return
	}
	cc.unparkLocked()
}

// unparkLocked hands a parked role back to the reader goroutine; under mu.
func (cc *clientConn) unparkLocked() {
	if cc.role != roleParked {
		return
	}
	cc.role = roleReader
	if cc.lent != nil {
		cc.lent = nil
		cc.lentTo.Store(nil)
	}
	cc.rwake <- struct{}{} // capacity 1, and only a parked role is woken
}

// interruptLocked ends a driving waiter's read (a deadline of now); under
// mu. The waiter clears the deadline before it hands the role back.
func (cc *clientConn) interruptLocked() {
	if cc.role == roleDriven && !cc.drvInt {
		cc.drvInt, cc.drvDl = true, true
		_ = cc.c.SetReadDeadline(time.Now())
	}
}

// deadlineLocked gives a driving waiter's reads its ctx's deadline once
// that is less than two watchdog ticks away (a farther one costs nothing
// per operation: the watchdog looks again each tick); under mu.
func (cc *clientConn) deadlineLocked(now time.Time) {
	if cc.drvDl || cc.drvCtx == nil {
		return
	}
	if dl, ok := cc.drvCtx.Deadline(); ok && dl.Sub(now) < 2*cc.r.b.cfg.WatchdogInterval {
		cc.drvDl = true
		_ = cc.c.SetReadDeadline(dl)
	}
}

// drive takes the role lent to wr, if it still is, and reads answers
// until wr's chunk has ended, ctx ended, or the buffer holds a frame that
// is not whole; then it hands the role back (parked again when the
// connection is idle and waiters want it).
func (cc *clientConn) drive(ctx context.Context, wr *backend.WorkRequest) {
	cc.mu.Lock()
	if cc.role != roleParked || cc.lent != wr || cc.failing {
		cc.mu.Unlock()
		return
	}
	id := cc.lentID
	cc.role = roleDriven
	cc.lent = nil
	cc.lentTo.Store(nil)
	if ctx.Done() != nil {
		cc.drvCtx = ctx
		if _, ok := ctx.Deadline(); ok {
			cc.deadlineLocked(time.Now())
		}
	}
	cc.mu.Unlock()
	br := cc.br
	own, answered := true, false
	for ctx.Err() == nil {
		if own, answered = cc.driveOwn(id); !own || br.Buffered() != 0 {
			break // done, or a frame not whole: the reader goroutine's
		}
		if err := br.fill(); err != nil {
			break // interrupted, or the connection's error: the reader meets it again
		}
		if !cc.driveFrames() {
			break
		}
	}
	cc.mu.Lock()
	if answered {
		cc.drove++
	}
	cc.drvCtx, cc.drvInt = nil, false
	if cc.drvDl {
		cc.drvDl = false
		_ = cc.c.SetReadDeadline(time.Time{})
	}
	cc.role = roleParked // the reader goroutine still waits on rwake
	parked := br.Buffered() == 0 && cc.idleLocked()
	if parked {
		cc.parkGen++
	} else {
		cc.unparkLocked()
	}
	cc.mu.Unlock()
	if parked {
		cc.r.kickWatchdog() // it may have gone idle while the role was driven
	}
}

// idleLocked reports, under mu, whether the read role may stay parked:
// waiters want it, nothing is in flight on the connection and the route
// has not failed (fail unparks every role after it records the error, so
// a role parked after that check would never see its connection close).
func (cc *clientConn) idleLocked() bool {
	return cc.r.wantDrive.Load() && cc.slots.held.Load() == 0 && cc.pings == 0 && !cc.failing && cc.r.Err() == nil
}

// driveOwn reports whether the chunk id (the driver's) is still to be
// answered (own): held, not abandoned by a cancel or deadline, not
// answered while its payload was being written (stAnswered: the writer
// completes it once its write returned, markSent), and the driver not
// interrupted. answered says its answer was read (by the driver, the
// role's only reader): its slot freed, or stAnswered; a cancel or
// deadline that ended it interrupted the driver under the same lock.
func (cc *clientConn) driveOwn(id uint64) (own, answered bool) {
	cc.mu.Lock()
	c := cc.slots.get(id)
	answered = !cc.drvInt && (c == nil || c.state == stAnswered)
	own = c != nil && c.state != stAbandoned && c.state != stAnswered && !cc.drvInt
	cc.mu.Unlock()
	return own, answered
}

// driveFrames handles the whole frames in the buffer as readLoop would,
// in batches, and reports whether the driver may read on: false when the
// buffer's next frame is not whole or not valid (left there for the
// reader goroutine, which reads the rest or fails the route) or the
// route failed.
func (cc *clientConn) driveFrames() bool {
	br, hs := cc.br, &cc.hs
	for br.Buffered() != 0 {
		k := 0
		for k < len(hs) && br.bufferedHeader() {
			n := respSize(br.buf[br.r] &^ respFlag)
			if hs[k].decode(br.buf[br.r:br.r+n]) != nil {
				break // the reader goroutine fails the route on it
			}
			if hs[k].length != 0 {
				if br.Buffered() < n+int(hs[k].length) {
					break // its payload is not whole
				}
				br.r += n
				k++
				break // one payload ends a batch, as in readLoop
			}
			br.r += n
			k++
		}
		if k == 0 {
			return false
		}
		cc.heard.Add(uint64(k))
		if err := cc.onResponses(br, hs[:k], &cc.done); err != nil {
			// As readLoop, nothing after a frame that breaks the protocol
			// is read: the reader goroutine must not parse what is
			// buffered behind it (a payload that is itself a header).
			br.r = br.w
			cc.r.fail(err)
			return false
		}
	}
	return true
}

// reclaimStale is the watchdog's, once a tick: a role parked or lent
// since the last tick goes back to the reader goroutine (an operation
// nobody waits for is read; an idle connection notices a peer that went
// away), and a driving waiter whose ctx ended is interrupted.
func (cc *clientConn) reclaimStale() {
	cc.mu.Lock()
	switch cc.role {
	case roleParked:
		if cc.parkGen == cc.parkSeen {
			if cc.lent != nil {
				cc.r.wantDrive.Store(false) // it was not waited for
			}
			cc.unparkLocked()
		}
		cc.parkSeen = cc.parkGen
	case roleDriven:
		if cc.drvCtx != nil && cc.drvCtx.Err() != nil {
			cc.interruptLocked()
		} else {
			cc.deadlineLocked(time.Now())
		}
	}
	cc.mu.Unlock()
}

// parked reports whether some connection's role is parked (the watchdog
// then keeps ticking to reclaim it).
func (r *route) parked() bool {
	for _, cc := range r.conns {
		if cc.parkedNow() {
			return true
		}
	}
	return false
}

func (cc *clientConn) parkedNow() bool { return cc.roleNow() == roleParked }

// roleNow returns who holds the read role.
func (cc *clientConn) roleNow() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.role
}

// unparkAll hands every parked role back to its reader goroutine: the
// route is failing (the readers must see their connections close), or a
// poster waits for room in flight that an unread answer would give back.
func (r *route) unparkAll() {
	for _, cc := range r.conns {
		cc.mu.Lock()
		cc.unparkLocked()
		cc.mu.Unlock()
	}
}
