//go:build linux

package hostagent

import (
	"context"
	"errors"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// askTimeout bounds the far route setup an ask waits for; maxAsks bounds
// a process's asks being answered (past it: answered unknown at once).
const (
	askTimeout = 3 * time.Second
	maxAsks    = 4
)

// ask answers the process's ask (agentwire version 3): the backend of
// our route set to the far agent, setting it up if there is none
// (bounded by askTimeout and the process's life, under the process's
// far-setup budget as its posts), AnswerUnknown if that fails. The answer
// is sent without waiting: a process whose socket is full misses it (it
// then shows "backend unknown yet").
func (p *proc) ask(q agentwire.Ask) {
	if p.asks.Add(1) > maxAsks || !p.a.spawn(func() { defer p.asks.Add(-1); p.answer(q, p.askBackend(q.Far)) }) {
		p.asks.Add(-1)
		p.answer(q, agentwire.AnswerUnknown)
	}
}

func (p *proc) askBackend(far string) byte {
	if err := p.farBudget(); err != nil {
		return agentwire.AnswerUnknown
	}
	ctx, cancel := context.WithTimeout(p.ctx, askTimeout)
	defer cancel()
	s, err := p.a.farSetOf(ctx, far)
	if err != nil {
		if !errors.Is(err, rdmamgr.ErrClosed) && ctx.Err() == nil {
			p.farFailed()
		}
		return agentwire.AnswerUnknown
	}
	switch s.kind {
	case backend.KindTCP:
		return agentwire.AnswerTCP
	case backend.KindIBVerbs:
		return agentwire.AnswerIBVerbs
	}
	return agentwire.AnswerUnknown
}

func (p *proc) answer(q agentwire.Ask, kind byte) {
	pkt, err := (&agentwire.Answer{ID: q.ID, Backend: kind}).Encode()
	if err != nil {
		return
	}
	if rc, err := p.conn.SyscallConn(); err == nil {
		_, _ = agentwire.TryWritePacket(rc, pkt)
	}
}
