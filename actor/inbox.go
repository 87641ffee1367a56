package actor

import (
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Message is a Send that landed in a receive buffer this manager posted
// (PostRecv), or, with Err set, one that was refused: none posted
// (ErrNoReceive) or larger than the buffer posted next
// (ErrReceiveTooSmall; that buffer stays posted). The sender saw the same
// error.
type Message struct {
	Peer   uint64        // the sending manager
	Buffer buffer.Buffer // the posted buffer, sliced to the message; zero when refused
	Length uint64        // the message's length
	Imm    uint32
	HasImm bool
	Err    error
}

// maxLandingsPerPeer bounds the messages of one peer landing at once: a
// receive buffer is taken when a message starts and held until its last
// byte lands (or the backend's deadline for it passes, FrameTimeout over
// TCP), so a peer that starts messages and stalls them holds at most
// this many buffers and queue slots, and the other peers' messages keep
// flowing. A peer's route sends its messages one after the other on one
// connection: two leave room for a route being replaced.
const maxLandingsPerPeer = 2

// inbox is the manager's backend.Inbox: PutWithImm events and Send
// messages for the subscribers. Bounded: a full queue refuses (the
// initiator's operation fails with ErrLimit), nothing is dropped silently.
type inbox struct {
	reg *memreg.Registry

	mu sync.Mutex // guards the fields below
	// events and msgs are the subscribers' queues (nil: nobody subscribed).
	events chan backend.Event
	msgs   chan Message
	// reserved counts the slots of msgs promised to landings in progress,
	// so that a message whose bytes landed is always delivered. A new
	// subscription starts at 0: a landing of an ended one reserved
	// nothing in it.
	reserved int
	// posted are the receive buffers, in order, with their references.
	posted []postedRecv
	// landing counts each peer's messages landing (a receive buffer
	// taken, the payload still arriving), for maxLandingsPerPeer.
	landing map[uint64]int
	// refused counts events and messages refused for a full queue or no
	// receiver.
	refused uint64
}

type postedRecv struct {
	h   buffer.Buffer
	ref memreg.Ref
}

// Event implements backend.Inbox.
func (in *inbox) Event(ev backend.Event) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.events == nil {
		in.refused++
		return fmt.Errorf("event %d from %016x: no event subscriber: %w", ev.Imm, ev.Peer, rdmamgr.ErrNoReceive)
	}
	select {
	case in.events <- ev:
		return nil
	default:
		in.refused++
		return fmt.Errorf("event %d from %016x: the subscriber's queue of %d is full: %w", ev.Imm, ev.Peer, cap(in.events), rdmamgr.ErrLimit)
	}
}

// Recv implements backend.Inbox.
func (in *inbox) Recv(peer uint64, n uint64) (backend.Landing, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var err error
	switch {
	case in.msgs == nil:
		in.refused++
		return nil, fmt.Errorf("message of %d bytes from %016x: no message subscriber: %w", n, peer, rdmamgr.ErrNoReceive)
	case len(in.msgs)+in.reserved >= cap(in.msgs):
		in.refused++
		return nil, fmt.Errorf("message of %d bytes from %016x: the subscriber's queue of %d is full: %w", n, peer, cap(in.msgs), rdmamgr.ErrLimit)
	case in.landing[peer] >= maxLandingsPerPeer:
		// A peer's messages come in order on one connection of its
		// route; more landing at once is a peer holding receive
		// buffers with stalled payloads, and it gets no more of them.
		in.refused++
		return nil, fmt.Errorf("message of %d bytes from %016x: %d of its messages landing already: %w", n, peer, in.landing[peer], rdmamgr.ErrLimit)
	case len(in.posted) == 0:
		err = fmt.Errorf("message of %d bytes from %016x: no receive buffer posted: %w", n, peer, rdmamgr.ErrNoReceive)
	case in.posted[0].h.Length < n:
		err = fmt.Errorf("message of %d bytes from %016x, receive buffer of %d: %w", n, peer, in.posted[0].h.Length, rdmamgr.ErrReceiveTooSmall)
	}
	if err != nil {
		in.refused++
		in.msgs <- Message{Peer: peer, Length: n, Err: err} // room checked above
		return nil, err
	}
	p := in.posted[0]
	in.posted = in.posted[1:]
	in.reserved++
	if in.landing == nil {
		in.landing = make(map[uint64]int)
	}
	in.landing[peer]++
	return &landing{in: in, p: p, peer: peer, ch: in.msgs}, nil
}

// landing is a receive buffer taken for one message.
type landing struct {
	in   *inbox
	p    postedRecv
	peer uint64
	ch   chan Message // the subscription it reserved a slot of
	once sync.Once
}

func (l *landing) Mem() []byte { return l.p.ref.Bytes() }

func (l *landing) Done(n int, imm uint32, hasImm bool, err error) {
	l.once.Do(func() {
		in := l.in
		in.mu.Lock()
		defer in.mu.Unlock()
		if k := in.landing[l.peer] - 1; k > 0 {
			in.landing[l.peer] = k
		} else {
			delete(in.landing, l.peer)
		}
		if in.msgs != l.ch {
			// Its subscription ended meanwhile (and took its posted
			// buffers back): nobody to tell, and no slot of a new
			// subscription was reserved for it.
			l.p.ref.Release()
			return
		}
		in.reserved--
		if err != nil || n < 0 || uint64(n) > l.p.h.Length {
			in.posted = append([]postedRecv{l.p}, in.posted...) // back to the front
			return
		}
		h, _ := l.p.h.Slice(0, uint64(n))
		l.p.ref.Release()
		in.msgs <- Message{Peer: l.peer, Buffer: h, Length: uint64(n), Imm: imm, HasImm: hasImm} // a slot was reserved
	})
}

// closeAll ends both subscriptions and gives the posted buffers back.
func (in *inbox) closeAll() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.closeEventsLocked()
	in.closeMessagesLocked()
}

func (in *inbox) closeEventsLocked() {
	if in.events != nil {
		close(in.events)
		in.events = nil
	}
}

func (in *inbox) closeMessagesLocked() {
	if in.msgs != nil {
		close(in.msgs)
		in.msgs = nil
	}
	in.reserved = 0 // landings in progress see their subscription ended
	for _, p := range in.posted {
		p.ref.Release()
	}
	in.posted = nil
}
