package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// maxReadBatch bounds the responses the reader handles under one hold of
// the connection's lock.
const maxReadBatch = 64

// readLoop reads responses and completes chunks; READ payload lands
// straight in the chunk's local memory. It takes responses in batches:
// one header, read however it comes, and then every whole header already
// buffered behind it (up to maxReadBatch, and up to one with payload);
// the batch is matched under one hold of the lock and its chunks finished
// together. It returns after failing the route when the connection fails
// or the peer breaks the protocol. It reads only while it holds the
// connection's read role, which it parks for a waiter while the
// connection is idle (drive.go).
func (cc *clientConn) readLoop() {
	defer cc.r.b.wg.Done()
	defer cc.r.ioWG.Done()
	br := cc.br
	defer br.close()
	hb, hs, done := &cc.hb, &cc.hs, &cc.done
	for {
		if br.Buffered() == 0 && cc.r.wantDrive.Load() {
			// drive.go: parked, a waiter may read meanwhile; the role
			// comes back with something to read (or an idle connection
			// to watch), so it reads before it parks again.
			cc.parkRole()
		}
		k := 0
		for k < len(hs) {
			if k > 0 && (hs[k-1].length != 0 || !br.bufferedHeader()) {
				break
			}
			n, err := readRespHeader(br, hb)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					cc.r.fail(fmt.Errorf("tcp: connection closed: %w", rdmamgr.ErrClosed))
				} else {
					cc.r.fail(fmt.Errorf("tcp: read: %w: %w", rdmamgr.ErrPeerGone, err))
				}
				return
			}
			if err := hs[k].decode(hb[:n]); err != nil {
				cc.r.fail(err)
				return
			}
			k++
		}
		cc.heard.Add(uint64(k))
		if err := cc.onResponses(br, hs[:k], done); err != nil {
			cc.r.fail(err)
			return
		}
	}
}

// readRespHeader reads a response header into hb (the fixed part, then
// an atomic's old value) and returns its size.
func readRespHeader(br *connReader, hb *[respMaxSize]byte) (int, error) {
	if _, err := br.ReadFull(hb[:respHeaderSize]); err != nil {
		return 0, err
	}
	n := respSize(hb[0] &^ respFlag)
	if n > respHeaderSize {
		if _, err := br.ReadFull(hb[respHeaderSize:n]); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// doneBatch holds the chunks a batch of responses ends, to be finished
// once the lock is let go.
type doneBatch struct {
	cs   [maxReadBatch]*chunk
	errs [maxReadBatch]error
	n    int
	// finish's scratch: the ops the batch ends, then their requests and
	// outcomes
	ops   [maxReadBatch]*op
	wrs   [maxReadBatch]*backend.WorkRequest
	outs  [maxReadBatch]error
	tally routestate.Tally
}

func (d *doneBatch) add(c *chunk, err error) {
	d.cs[d.n], d.errs[d.n] = c, err
	d.n++
}

// finish finishes the batch's chunks and empties it: their room in
// flight back at once, the fence told of the batch's WRITEs and atomics
// under one lock, then the ops that ended reported together, in order
// (qpbind.RunCompleter: a queue pair's requests reach their completion
// queue under one lock; any other Done gets its own Complete).
func (d *doneBatch) finish() {
	if d.n == 0 {
		return
	}
	r := d.cs[0].op.r // one route: the connection's
	r.sem.release(int64(d.n))
	k, fenced := 0, false
	for i := range d.n {
		c, err := d.cs[i], d.errs[i]
		d.cs[i], d.errs[i] = nil, nil
		if o := c.settle(err); o != nil {
			d.ops[k] = o
			k++
			fenced = fenced || o.fenceEpoch != 0
		}
	}
	d.n = 0
	if k == 0 {
		return
	}
	if fenced {
		r.fenceDoneAll(d.ops[:k]) // fence.go: may release notices held behind them
	}
	for i := range k {
		d.wrs[i], d.outs[i] = d.ops[i].endUncounted()
		d.tally.Add(d.wrs[i], d.outs[i])
		d.ops[i] = nil
	}
	r.EndTally(&d.tally) // the route's counters, once per batch
	if rc, ok := d.wrs[0].Done.(qpbind.RunCompleter); ok && k > 1 {
		rc.CompleteRun(d.wrs[:k], d.outs[:k])
	} else {
		for i := range k {
			d.wrs[i].Done.Complete(d.wrs[i], d.outs[i])
		}
	}
	clear(d.wrs[:k])
	clear(d.outs[:k])
}

// onResponses handles a batch of decoded response headers, of which only
// the last may carry payload (read here, after the others are finished).
// An error is the route's: a response that does not match, or a failed
// read; the chunks the batch ended before it are finished still.
func (cc *clientConn) onResponses(br *connReader, hs []respHeader, done *doneBatch) error {
	var payload *chunk
	var abandoned bool
	var err error
	cc.mu.Lock()
	for i := range hs {
		if payload, abandoned, err = cc.match(&hs[i], done); err != nil {
			break
		}
	}
	if len(cc.pend) > 0 {
		cc.kickLocked() // frames held back for a batch (wireLow) go now
	}
	cc.mu.Unlock()
	done.finish()
	if err != nil || payload == nil {
		return err
	}
	return cc.onPayload(br, payload, hs[len(hs)-1].length, abandoned)
}

// match handles one response header under mu: a chunk it ends goes to
// done; a chunk whose payload is to be read is returned (abandoned: into
// a sink). An error is the route's: a response that does not match.
func (cc *clientConn) match(h *respHeader, done *doneBatch) (*chunk, bool, error) {
	if h.op == opPing {
		if h.length != 0 || h.code != 0 {
			return nil, false, fmt.Errorf("tcp: malformed ping response: %w", rdmamgr.ErrProtocol)
		}
		if cc.pings > 0 {
			cc.pings--
		}
		return nil, false, nil
	}
	c := cc.slots.get(h.wrid)
	// A response for a request not yet sent (queued) or already
	// answered cannot be genuine; nor can one naming an id not held
	// now (forged, or for a slot freed since: slots.go).
	if c == nil || c.state == stQueued || c.state == stAnswered || c.wop != h.op ||
		(h.length != 0 && h.length != uint32(len(c.local))) ||
		(h.op == opRead && h.code == 0 && h.length == 0) {
		return nil, false, fmt.Errorf("tcp: response for wrid %d does not match: %w", h.wrid, rdmamgr.ErrProtocol)
	}
	if c.state == stSending && hasPayload(h.op) {
		// The writer may still be reading c.local (a peer can answer
		// before it read the payload): it completes the chunk in
		// markSent once its write returned.
		c.state = stAnswered
		if h.code != 0 {
			c.answer = codeErr(h.op, h.code)
		}
		return nil, false, nil
	}
	abandoned := c.state == stAbandoned
	if h.length > 0 && !abandoned {
		c.state = stReceiving
	}
	if abandoned || h.length == 0 {
		cc.slots.del(h.wrid)
	}
	if h.length > 0 {
		return c, abandoned, nil
	}
	if abandoned {
		return nil, false, nil
	}
	var err error
	if h.code != 0 {
		err = codeErr(h.op, h.code)
	} else if h.size() > respHeaderSize {
		// c is out of slots: no cancel can end it (and let its work
		// request be reused) before finish.
		c.op.wr.Result = h.value
	}
	done.add(c, err)
	return nil, false, nil
}

// onPayload reads a READ response's n payload bytes into c's memory (and
// ends c), or into a sink when c was abandoned.
func (cc *clientConn) onPayload(br *connReader, c *chunk, n uint32, abandoned bool) error {
	var err error
	if abandoned {
		_, err = io.CopyN(io.Discard, br, int64(n))
	} else {
		err = cc.readPayload(br, c)
	}
	if err != nil {
		// The chunk stays in slots as receiving; drain fails it after
		// the read loop has exited.
		return fmt.Errorf("tcp: read payload: %w: %w", rdmamgr.ErrPeerGone, err)
	}
	return nil
}
