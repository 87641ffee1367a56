//go:build linux

package hostagent

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
)

// noticeTimeout bounds the answer to an event or a message for an
// attached process, from the moment it was queued: one not handed on by
// then is answered ErrDeadline (the sender hears; a queue behind a
// process that does not answer drains at once).
const noticeTimeout = 5 * time.Second

// maxMessage bounds a message staged for a process (a Send is one TCP
// frame: the TCP backend's MaxFrameLen bounds it first).
const maxMessage = 16 << 20

// noticeQueue bounds the events and messages waiting for one process,
// and maxStaged the bytes of its messages staged meanwhile: past either,
// one more is refused at once with ErrLimit (as a full subscriber queue
// refuses on the direct path). (Variables: tests change them.)
var noticeQueue, maxStaged atomic.Int64

func init() {
	noticeQueue.Store(1024)
	maxStaged.Store(64 << 20)
}

// notice is an event or a message waiting for its process's deliverer.
type notice struct {
	ev     backend.Event
	msg    *landing // nil: an event
	n      int
	imm    uint32
	hasImm bool
	answer func(error)
	// deadline: queued + noticeTimeout.
	deadline time.Time
}

// procInbox is an attached process's inbox as the TCP backend sees it:
// events and messages from far processes, delivered over the process's
// shm route, naming their origin. It answers later (agentapi.AsyncInbox,
// AsyncLanding): each process has its own queue and deliverer, so a
// process slow to answer holds up only its own notices, never the
// connection between two agents that every process shares.
type procInbox proc

var _ agentapi.AsyncInbox = (*procInbox)(nil)

// Event implements backend.Inbox (a backend that does not answer later):
// it queues ev and waits for the process's answer.
func (pi *procInbox) Event(ev backend.Event) error {
	c := make(chan error, 1)
	if err := pi.EventAsync(ev, func(err error) { c <- err }); err != nil {
		return err
	}
	return <-c
}

// EventAsync implements agentapi.AsyncInbox: ev's bytes are in the
// process's region (the TCP server wrote them through the proxy); the
// deliverer hands it to the process's owner code as a notice naming the
// far process as its Peer (the origin), and the process's refusal is the
// answer. Queued behind the process's other notices (their order).
func (pi *procInbox) EventAsync(ev backend.Event, answer func(error)) error {
	return (*proc)(pi).queueNotice(notice{ev: ev, answer: answer})
}

// Recv implements backend.Inbox: the message lands in a staging buffer of
// the agent (at most maxStaged bytes per process at once), and
// DeliverAsync hands it on to the process (an shm Send naming the
// origin), whose answer is the sender's: no receive posted, too small, a
// full queue.
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
	if s := p.staged.Add(int64(n)); s > maxStaged.Load() {
		p.staged.Add(-int64(n))
		return nil, fmt.Errorf("hostagent: %d bytes of messages staged for pid %d: %w", s-int64(n), p.pid, rdmamgr.ErrLimit)
	}
	return &landing{p: p, peer: peer, mem: make([]byte, n)}, nil
}

// landing is a message staged for a process.
type landing struct {
	p    *proc
	peer uint64
	mem  []byte
}

var _ agentapi.AsyncLanding = (*landing)(nil)

func (l *landing) Mem() []byte { return l.mem }

// Done: the transfer failed (a delivered message goes through Deliver);
// the staging buffer is dropped.
func (l *landing) Done(int, uint32, bool, error) { l.drop() }

// drop gives the staging buffer's bytes back to the process's bound.
func (l *landing) drop() {
	if l.mem != nil {
		l.p.staged.Add(-int64(len(l.mem)))
		l.mem = nil
	}
}

// Deliver hands the message on and waits for the process's answer.
func (l *landing) Deliver(n int, imm uint32, hasImm bool) error {
	c := make(chan error, 1)
	if err := l.DeliverAsync(n, imm, hasImm, func(err error) { c <- err }); err != nil {
		return err
	}
	return <-c
}

// DeliverAsync implements agentapi.AsyncLanding: the message is queued
// behind the process's other notices; the deliverer sends it on.
func (l *landing) DeliverAsync(n int, imm uint32, hasImm bool, answer func(error)) error {
	err := l.p.queueNotice(notice{msg: l, n: n, imm: imm, hasImm: hasImm, answer: answer})
	if err != nil {
		l.drop()
	}
	return err
}

// queueNotice queues nt for the deliverer, or refuses it at once: the
// queue is full (ErrLimit) or the process went (ErrPeerGone).
func (p *proc) queueNotice(nt notice) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.noticesOver {
		return fmt.Errorf("hostagent: pid %d: %w", p.pid, rdmamgr.ErrPeerGone)
	}
	nt.deadline = time.Now().Add(noticeTimeout)
	select {
	case p.notices <- nt:
		return nil
	default:
		return fmt.Errorf("hostagent: %d events and messages wait for pid %d: %w", len(p.notices), p.pid, rdmamgr.ErrLimit)
	}
}

// deliverer hands the process its notices one at a time, in order, and
// answers each within noticeTimeout of its queueing; once the process
// goes, what is queued is answered ErrPeerGone.
func (p *proc) deliverer() {
	defer p.loops.Done()
	for {
		select {
		case nt := <-p.notices:
			nt.answer(p.deliver(&nt))
		case <-p.dead:
			p.mu.Lock()
			p.noticesOver = true // nothing is queued after this
			p.mu.Unlock()
			gone := fmt.Errorf("hostagent: pid %d: %w", p.pid, rdmamgr.ErrPeerGone)
			for {
				select {
				case nt := <-p.notices:
					if nt.msg != nil {
						nt.msg.drop()
					}
					nt.answer(gone)
				default:
					return
				}
			}
		}
	}
}

// deliver hands one notice to the process and returns its answer.
func (p *proc) deliver(nt *notice) error {
	if nt.msg != nil {
		defer nt.msg.drop()
	}
	if !time.Now().Before(nt.deadline) {
		return fmt.Errorf("hostagent: pid %d did not take its notices within %v: %w", p.pid, noticeTimeout, rdmamgr.ErrDeadline)
	}
	ctx, cancel := context.WithDeadline(p.ctx, nt.deadline)
	defer cancel()
	if nt.msg == nil {
		ev := &nt.ev
		return p.pr.Notify(ctx, ev.Region, ev.Offset, ev.Length, ev.Imm, ev.Peer)
	}
	c := syncCompleter(make(chan error, 1))
	wr := backend.WorkRequest{Op: backend.OpSend, Local: nt.msg.mem[:nt.n], Imm: nt.imm, HasImm: nt.hasImm,
		Origin: nt.msg.peer, Deadline: nt.deadline, Done: c}
	if err := p.route.Post(&wr); err != nil {
		return err
	}
	return <-c
}

// syncCompleter hands a completion to a waiting poster.
type syncCompleter chan error

func (c syncCompleter) Complete(_ *backend.WorkRequest, err error) { c <- err }
