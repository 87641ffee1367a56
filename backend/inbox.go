package backend

// Event is a PutWithImm (OpWriteImm) that landed in one of this manager's
// buffers: the bytes [Offset, Offset+Length) of region Region are in
// place before the Event is delivered.
type Event struct {
	Peer   uint64 // the initiating manager
	Region uint64
	Offset uint64
	Length uint64
	Imm    uint32
}

// Landing is the receive buffer a message lands in: the backend writes the
// message into Mem and then calls Done exactly once (with a nil error
// once every byte is in place: the message is then delivered; with an
// error if the transfer failed: the buffer goes back to the front of the
// receive queue).
type Landing interface {
	Mem() []byte
	Done(n int, imm uint32, hasImm bool, err error)
}

// Inbox is the owner's side of PutWithImm and Send: the manager gives one
// to each backend that implements InboxUser. Both calls may run on the
// backend's data path: they do not block.
type Inbox interface {
	// Event hands ev to the owner's event subscriber. It fails with
	// rdmamgr.ErrNoReceive when nobody subscribed and with ErrLimit when
	// the subscriber's queue is full (a counted refusal): the backend
	// returns the error to the initiator, whose operation fails with it
	// (its bytes did land). Nothing is lost silently.
	Event(ev Event) error
	// Recv takes the next receive buffer posted for a message of n bytes
	// from peer. It fails with rdmamgr.ErrNoReceive when none is posted and
	// with rdmamgr.ErrReceiveTooSmall when the next one is smaller than n
	// (it stays posted); the receiver's subscriber is told of either
	// refusal too, and the backend returns it to the initiator.
	Recv(peer uint64, n uint64) (Landing, error)
}

// InboxUser is implemented by backends that deliver PutWithImm events and
// Send messages; the manager calls SetInbox once, before it posts or
// accepts any route. A backend without an inbox refuses both with
// rdmamgr.ErrNoReceive.
type InboxUser interface {
	SetInbox(Inbox)
}

// Capabilities say which operations beyond Put and Get a backend's routes
// carry.
type Capabilities interface {
	// Supports reports whether routes of the backend carry op (a device
	// without atomics reports false for them).
	Supports(op Op) bool
}
