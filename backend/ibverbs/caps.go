//go:build ibverbs

package ibverbs

import "github.com/rdmamgr/rdmamgr/backend"

// inboxRef holds the manager's inbox (an interface in an atomic pointer).
type inboxRef struct{ in backend.Inbox }

// SetInbox implements backend.InboxUser: the owner's side of PutWithImm
// and Send. Without one the backend refuses both with ErrNoReceive.
func (b *Backend) SetInbox(in backend.Inbox) { b.inbox.Store(&inboxRef{in}) }

func (b *Backend) inboxOf() backend.Inbox {
	if p := b.inbox.Load(); p != nil {
		return p.in
	}
	return nil
}

// Supports implements backend.Capabilities: every operation, but the
// atomics only on a started backend whose device runs them (and a route
// carries them only if the peer's does too: see Route.Post).
func (b *Backend) Supports(op backend.Op) bool {
	switch op {
	case backend.OpWrite, backend.OpRead, backend.OpWriteImm, backend.OpSend:
		return true
	case backend.OpCompareSwap, backend.OpFetchAdd:
		b.life.RLock()
		defer b.life.RUnlock()
		return b.started && b.atomics
	}
	return false
}
