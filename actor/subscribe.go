package actor

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Events is a subscription to the PutWithImm events on this manager's
// buffers (SubscribeEvents). C is closed by Close and when the manager
// closes.
type Events struct {
	C  <-chan backend.Event
	m  *Manager
	ch chan backend.Event
}

// SubscribeEvents starts delivering PutWithImm events (an event is never
// delivered before its bytes are in place) into a queue of capacity
// events. One subscriber at a time (ErrLimit for a second). When the
// queue is full, further events are refused: the initiator's PutWithImm
// fails with ErrLimit (its bytes did land) and the refusal is counted.
func (m *Manager) SubscribeEvents(capacity int) (*Events, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("event queue of %d: %w", capacity, rdmamgr.ErrInvalid)
	}
	in := &m.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	if m.isClosed() {
		return nil, rdmamgr.ErrClosed
	}
	if in.events != nil {
		return nil, fmt.Errorf("events already have a subscriber: %w", rdmamgr.ErrLimit)
	}
	in.events = make(chan backend.Event, capacity)
	return &Events{C: in.events, m: m, ch: in.events}, nil
}

// Close ends the subscription: later events are refused with
// ErrNoReceive. Idempotent.
func (e *Events) Close() {
	in := &e.m.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.events == e.ch {
		in.closeEventsLocked()
	}
}

// Messages is a subscription to the Sends that land in this manager's
// posted receive buffers (SubscribeMessages).
type Messages struct {
	C  <-chan Message
	m  *Manager
	ch chan Message
}

// SubscribeMessages starts delivering messages, and the refusals of
// messages that found no posted buffer or too small a one, into a queue
// of capacity. One subscriber at a time. A message is refused with
// ErrLimit (the sender sees it) while the queue is full.
func (m *Manager) SubscribeMessages(capacity int) (*Messages, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("message queue of %d: %w", capacity, rdmamgr.ErrInvalid)
	}
	in := &m.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	if m.isClosed() {
		return nil, rdmamgr.ErrClosed
	}
	if in.msgs != nil {
		return nil, fmt.Errorf("messages already have a subscriber: %w", rdmamgr.ErrLimit)
	}
	in.msgs = make(chan Message, capacity)
	return &Messages{C: in.msgs, m: m, ch: in.msgs}, nil
}

// Close ends the subscription and gives every posted receive buffer back
// (unposted). Idempotent.
func (s *Messages) Close() {
	in := &s.m.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.msgs == s.ch {
		in.closeMessagesLocked()
	}
}

// PostRecv posts local buffer b (of this manager) to receive the next
// Send from any peer, in order of posting. The buffer is held (its
// Release waits) until a message lands in it or the message subscription
// closes. It needs a message subscriber.
func (m *Manager) PostRecv(b buffer.Buffer) error {
	ref, err := m.reg.AcquireLocal(b)
	if err != nil {
		return fmt.Errorf("post receive: %w", err)
	}
	in := &m.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.msgs == nil {
		ref.Release()
		return fmt.Errorf("post receive: no message subscriber: %w", rdmamgr.ErrNoReceive)
	}
	in.posted = append(in.posted, postedRecv{h: b, ref: ref})
	return nil
}

// InboxRefused returns how many events and messages were refused (no
// subscriber, no or too small a receive buffer, a full queue).
func (m *Manager) InboxRefused() uint64 {
	m.inbox.mu.Lock()
	defer m.inbox.mu.Unlock()
	return m.inbox.refused
}
