package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/rdmamgr/rdmamgr"
)

// readLoop reads responses and completes chunks; READ payload lands
// straight in the chunk's local memory. It returns after failing the route
// when the connection fails or the peer breaks the protocol.
func (cc *clientConn) readLoop() {
	defer cc.r.b.wg.Done()
	defer cc.r.ioWG.Done()
	br := newConnReader(cc.c)
	defer br.close()
	var hb [respMaxSize]byte
	var h respHeader
	for {
		n, err := readRespHeader(br, &hb)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				cc.r.fail(fmt.Errorf("tcp: connection closed: %w", rdmamgr.ErrClosed))
			} else {
				cc.r.fail(fmt.Errorf("tcp: read: %w: %w", rdmamgr.ErrPeerGone, err))
			}
			return
		}
		if err := h.decode(hb[:n]); err != nil {
			cc.r.fail(err)
			return
		}
		cc.heard.Add(1)
		if err := cc.onResponse(br, &h); err != nil {
			cc.r.fail(err)
			return
		}
	}
}

// readRespHeader reads a response header into hb (the fixed part, then
// an atomic's old value) and returns its size.
func readRespHeader(br *connReader, hb *[respMaxSize]byte) (int, error) {
	if _, err := io.ReadFull(br, hb[:respHeaderSize]); err != nil {
		return 0, err
	}
	n := respSize(hb[0] &^ respFlag)
	if n > respHeaderSize {
		if _, err := io.ReadFull(br, hb[respHeaderSize:n]); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// onResponse handles one decoded response header (and its payload). An
// error is the route's: a response that does not match, or a failed read.
func (cc *clientConn) onResponse(br *connReader, h *respHeader) error {
	if h.op == opPing {
		if h.length != 0 || h.code != 0 {
			return fmt.Errorf("tcp: malformed ping response: %w", rdmamgr.ErrProtocol)
		}
		return nil
	}
	cc.mu.Lock()
	c := cc.slots.get(h.wrid)
	// A response for a request not yet sent (queued) or already
	// answered cannot be genuine.
	if c == nil || c.state == stQueued || c.state == stAnswered || c.wop != h.op ||
		(h.length != 0 && h.length != uint32(len(c.local))) ||
		(h.op == opRead && h.code == 0 && h.length == 0) {
		cc.mu.Unlock()
		return fmt.Errorf("tcp: response for wrid %d does not match: %w", h.wrid, rdmamgr.ErrProtocol)
	}
	if c.state == stSending && hasPayload(h.op) {
		// The writer may still be reading c.local (a peer can answer
		// before it read the payload): it completes the chunk in
		// markSent once its write returned.
		c.state = stAnswered
		if h.code != 0 {
			c.answer = codeErr(h.op, h.code)
		}
		cc.mu.Unlock()
		return nil
	}
	abandoned := c.state == stAbandoned
	if h.length > 0 && !abandoned {
		c.state = stReceiving
	}
	if abandoned || h.length == 0 {
		cc.slots.del(h.wrid)
	}
	cc.mu.Unlock()

	if h.length > 0 {
		return cc.onPayload(br, c, h.length, abandoned)
	}
	if abandoned {
		return nil
	}
	var err error
	if h.code != 0 {
		err = codeErr(h.op, h.code)
	} else if h.size() > respHeaderSize {
		// c is out of slots: no cancel can end it (and let its work
		// request be reused) before finish.
		c.op.wr.Result = h.value
	}
	c.finish(err)
	return nil
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
