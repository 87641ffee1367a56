package tcp

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// The backend's side of PutWithImm, Send and the atomics: the inbox the
// manager gives it, and what its routes carry. The owner's side of each
// operation is server_verbs.go; the initiator's is route.go (the lane)
// and op.go (the frames of an operation).

var (
	_ backend.InboxUser    = (*Backend)(nil)
	_ backend.Capabilities = (*Backend)(nil)
)

// inboxRef boxes the inbox for an atomic pointer.
type inboxRef struct{ in backend.Inbox }

// SetInbox implements backend.InboxUser: in receives the events and
// messages peers send from now on (nil: they are refused with
// ErrNoReceive).
func (b *Backend) SetInbox(in backend.Inbox) {
	if in == nil {
		b.inbox.Store(nil)
		return
	}
	b.inbox.Store(&inboxRef{in: in})
}

// Supports implements backend.Capabilities: TCP routes carry every
// operation.
func (b *Backend) Supports(op backend.Op) bool { return wireOp(op) != 0 }

// errNoInbox refuses events and messages before SetInbox.
var errNoInbox = fmt.Errorf("tcp: no inbox: %w", rdmamgr.ErrNoReceive)

// event hands ev to the inbox.
func (b *Backend) event(ev backend.Event) error {
	r := b.inbox.Load()
	if r == nil {
		return errNoInbox
	}
	return r.in.Event(ev)
}

// recv takes a landing for a message of n bytes from peer.
func (b *Backend) recv(peer, n uint64) (backend.Landing, error) {
	r := b.inbox.Load()
	if r == nil {
		return nil, errNoInbox
	}
	return r.in.Recv(peer, n)
}
