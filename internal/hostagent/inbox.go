//go:build linux

package hostagent

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// noticeTimeout bounds the delivery of an event or a message to an
// attached process (one round trip on its shm route).
const noticeTimeout = 5 * time.Second

// maxMessage bounds a message staged for a process (a Send is one TCP
// frame: the TCP backend's MaxFrameLen bounds it first).
const maxMessage = 16 << 20

// procInbox is an attached process's inbox as the TCP backend sees it:
// events and messages from far processes, delivered over the process's
// shm route, naming their origin.
type procInbox proc

// Event implements backend.Inbox: ev's bytes are in the process's region
// (the TCP server wrote them through the proxy); the process's owner code
// delivers the event to its subscriber, with Peer the far process (the
// origin), and its refusal is the answer. It waits for the process's
// answer (one round trip on the shm route, within noticeTimeout), so the
// events of one connection stay in order.
func (pi *procInbox) Event(ev backend.Event) error {
	p := (*proc)(pi)
	ctx, cancel := context.WithTimeout(p.ctx, noticeTimeout)
	defer cancel()
	return p.pr.Notify(ctx, ev.Region, ev.Offset, ev.Length, ev.Imm, ev.Peer)
}

// Recv implements backend.Inbox: the message lands in a staging buffer of
// the agent, and Done sends it on to the process (an shm Send with the
// origin), waiting for it. The process's refusal then (no receive posted,
// too small, a full queue) comes after the sender was answered: it is
// logged and the message dropped (backend.Landing.Done has no way back).
func (pi *procInbox) Recv(peer uint64, n uint64) (backend.Landing, error) {
	p := (*proc)(pi)
	if n > maxMessage {
		return nil, fmt.Errorf("hostagent: message of %d bytes for pid %d: %w", n, p.pid, rdmamgr.ErrLimit)
	}
	select {
	case <-p.dead:
		return nil, fmt.Errorf("hostagent: pid %d: %w", p.pid, rdmamgr.ErrPeerGone)
	default:
	}
	return &landing{p: p, peer: peer, mem: make([]byte, n)}, nil
}

// landing is a message staged for a process.
type landing struct {
	p    *proc
	peer uint64
	mem  []byte
}

func (l *landing) Mem() []byte { return l.mem }

// Done sends the message on, unless it failed.
func (l *landing) Done(n int, imm uint32, hasImm bool, err error) {
	if err != nil {
		return
	}
	p := l.p
	c := syncCompleter(make(chan error, 1))
	wr := backend.WorkRequest{Op: backend.OpSend, Local: l.mem[:n], Imm: imm, HasImm: hasImm,
		Origin: l.peer, Deadline: time.Now().Add(noticeTimeout), Done: c}
	if err := p.route.Post(&wr); err != nil {
		c <- err
	}
	if err := <-c; err != nil {
		p.a.log.Warn("message for an attached process dropped", "pid", p.pid, "from", fmt.Sprintf("%016x", l.peer), "err", err)
	}
}

// syncCompleter hands a completion to a waiting poster.
type syncCompleter chan error

func (c syncCompleter) Complete(_ *backend.WorkRequest, err error) { c <- err }
