package agent

import (
	"context"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// askTimeout bounds the wait for the agent's answer to an ask (it may set
// up its route to the far agent first: hostagent waits 3 s at most).
const askTimeout = 4 * time.Second

// overOf returns what a route's reason says of the backend that the two
// agents' route runs on: " over tcp" or " over ibverbs" as our agent
// answers, ", backend unknown yet" when it could not tell (in time), ""
// from an agent that speaks no asks (agentwire version 2), so the reason
// stays what it was. Bounded by ctx and askTimeout.
func (a *attachment) overOf(ctx context.Context, far string) string {
	if a.version < 3 {
		return ""
	}
	const unknown = ", backend unknown yet"
	ch := make(chan byte, 1)
	a.mu.Lock()
	if a.ended || a.going != nil {
		a.mu.Unlock()
		return unknown
	}
	a.lastAsk++
	id := a.lastAsk
	a.asks[id] = ch
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.asks, id)
		a.mu.Unlock()
	}()
	pkt, err := (&agentwire.Ask{ID: id, Far: far}).Encode()
	if err != nil {
		return unknown
	}
	rc, err := a.conn.SyscallConn()
	if err != nil {
		return unknown
	}
	if ok, err := agentwire.TryWritePacket(rc, pkt); !ok || err != nil {
		return unknown // the socket is full: not worth waiting for
	}
	t := time.NewTimer(askTimeout)
	defer t.Stop()
	select {
	case k := <-ch:
		switch k {
		case agentwire.AnswerTCP:
			return " over tcp"
		case agentwire.AnswerIBVerbs:
			return " over ibverbs"
		}
	case <-ctx.Done():
	case <-t.C:
	case <-a.done:
	}
	return unknown
}

// answered hands the agent's answer to its ask; one to no ask waiting
// (late, or the agent's invention) is dropped.
func (a *attachment) answered(ans agentwire.Answer) {
	a.mu.Lock()
	ch := a.asks[ans.ID]
	delete(a.asks, ans.ID)
	a.mu.Unlock()
	if ch != nil {
		ch <- ans.Backend // capacity 1, and sent at most once (deleted)
	}
}
