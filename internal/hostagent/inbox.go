//go:build linux

package hostagent

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
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
// the agent, and Deliver hands it on to the process (an shm Send naming
// the origin), waiting for the process's answer, which is the sender's
// (agentapi.CheckedLanding): no receive posted, too small, a full queue.
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

var _ agentapi.CheckedLanding = (*landing)(nil)

func (l *landing) Mem() []byte { return l.mem }

// Done: the transfer failed (a delivered message goes through Deliver);
// the staging buffer is dropped.
func (l *landing) Done(int, uint32, bool, error) {}

// Deliver sends the message on to the process and returns its refusal.
func (l *landing) Deliver(n int, imm uint32, hasImm bool) error {
	p := l.p
	c := syncCompleter(make(chan error, 1))
	wr := backend.WorkRequest{Op: backend.OpSend, Local: l.mem[:n], Imm: imm, HasImm: hasImm,
		Origin: l.peer, Deadline: time.Now().Add(noticeTimeout), Done: c}
	if err := p.route.Post(&wr); err != nil {
		return err
	}
	return <-c
}

// syncCompleter hands a completion to a waiting poster.
type syncCompleter chan error

func (c syncCompleter) Complete(_ *backend.WorkRequest, err error) { c <- err }
