//go:build linux

package hostagent

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// procInbox is an attached process's inbox as the TCP backend sees it:
// events and messages from far processes for it.
type procInbox proc

// Event implements backend.Inbox.
func (pi *procInbox) Event(ev backend.Event) error {
	return fmt.Errorf("hostagent: events through the agent: %w", rdmamgr.ErrNotSupported)
}

// Recv implements backend.Inbox.
func (pi *procInbox) Recv(peer uint64, n uint64) (backend.Landing, error) {
	return nil, fmt.Errorf("hostagent: messages through the agent: %w", rdmamgr.ErrNotSupported)
}
