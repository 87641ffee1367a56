package backendtest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Inbox is a backend.Inbox for the suite and for backends' own tests: the
// owner's side of PutWithImm and Send as a manager has it (actor's inbox),
// without a manager. Events and messages go into bounded queues that
// refuse when full (ErrLimit, counted); receive buffers are posted from
// the owner's registry (Post) and taken in order. It allocates nothing on
// the path of a delivered event or message (landings are reused), so a
// backend's allocation test can use it.
type Inbox struct {
	reg *memreg.Registry

	mu sync.Mutex // guards the fields below
	// check, when set, is called by Event before the event is queued;
	// msgCheck by a landing's Done before its message is queued.
	check    func(backend.Event) error
	msgCheck func(Message) error
	// events and msgs are the queues; the channels stay readable after
	// StopEvents and StopMessages, which set the *Off flags.
	events    chan backend.Event
	msgs      chan Message
	eventsOff bool
	msgsOff   bool
	// reserved counts message slots held for landings in progress.
	reserved int
	posted   []posted
	free     []*landing // landings to reuse
	// refusals.
	refusedEvents, refusedMsgs uint64
	lastRefusal                error
	// faults the inbox saw in the backend's use of it (Fault).
	faults []error
}

// Message is a message the Inbox delivered: it landed in Buffer (the
// posted buffer, sliced to the message), whose memory is Mem.
type Message struct {
	Peer   uint64
	Buffer buffer.Buffer
	Mem    []byte
	Imm    uint32
	HasImm bool
}

type posted struct {
	h   buffer.Buffer
	ref memreg.Ref
}

// NewInbox returns an Inbox whose receive buffers come from reg (the
// owner's registry) with queues of events and messages capacity.
func NewInbox(reg *memreg.Registry, events, messages int) *Inbox {
	return &Inbox{reg: reg, events: make(chan backend.Event, events), msgs: make(chan Message, messages)}
}

// Events returns the queue of delivered events.
func (in *Inbox) Events() <-chan backend.Event { return in.events }

// Messages returns the queue of delivered messages.
func (in *Inbox) Messages() <-chan Message { return in.msgs }

// SetCheck makes Event call check with each event first, on the
// backend's delivery path (e.g. to verify its bytes are in place); an
// error is recorded as a fault.
func (in *Inbox) SetCheck(check func(backend.Event) error) {
	in.mu.Lock()
	in.check = check
	in.mu.Unlock()
}

// SetMessageCheck makes a landing's Done call check with each message
// first, on the backend's delivery path, as SetCheck does for events.
func (in *Inbox) SetMessageCheck(check func(Message) error) {
	in.mu.Lock()
	in.msgCheck = check
	in.mu.Unlock()
}

// StopEvents makes later events fail with ErrNoReceive (nobody
// subscribed); StopMessages does the same for messages.
func (in *Inbox) StopEvents() {
	in.mu.Lock()
	in.eventsOff = true
	in.mu.Unlock()
}

// StopMessages: see StopEvents.
func (in *Inbox) StopMessages() {
	in.mu.Lock()
	in.msgsOff = true
	in.mu.Unlock()
}

// Event implements backend.Inbox.
func (in *Inbox) Event(ev backend.Event) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.check != nil {
		if err := in.check(ev); err != nil {
			in.faults = append(in.faults, fmt.Errorf("event %+v: %w", ev, err))
		}
	}
	var err error
	if in.eventsOff {
		err = fmt.Errorf("event %d: no subscriber: %w", ev.Imm, rdmamgr.ErrNoReceive)
	} else {
		select {
		case in.events <- ev:
			return nil
		default:
			err = fmt.Errorf("event %d: queue of %d full: %w", ev.Imm, cap(in.events), rdmamgr.ErrLimit)
		}
	}
	in.refusedEvents++
	in.lastRefusal = err
	return err
}

// Post posts the owner's buffer b (of the Inbox's registry) to receive
// the next message; it is held until a message lands in it or Close.
func (in *Inbox) Post(b buffer.Buffer) error {
	ref, err := in.reg.AcquireLocal(b)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.posted = append(in.posted, posted{h: b, ref: ref})
	in.mu.Unlock()
	return nil
}

// Posted returns the number of receive buffers posted and not taken.
func (in *Inbox) Posted() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.posted)
}

// Recv implements backend.Inbox.
func (in *Inbox) Recv(peer uint64, n uint64) (backend.Landing, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var err error
	switch {
	case in.msgsOff:
		err = fmt.Errorf("message of %d bytes: no subscriber: %w", n, rdmamgr.ErrNoReceive)
	case len(in.msgs)+in.reserved >= cap(in.msgs):
		err = fmt.Errorf("message of %d bytes: queue of %d full: %w", n, cap(in.msgs), rdmamgr.ErrLimit)
	case len(in.posted) == 0:
		err = fmt.Errorf("message of %d bytes: no receive buffer posted: %w", n, rdmamgr.ErrNoReceive)
	case in.posted[0].h.Length < n:
		err = fmt.Errorf("message of %d bytes, receive buffer of %d: %w", n, in.posted[0].h.Length, rdmamgr.ErrReceiveTooSmall)
	}
	if err != nil {
		in.refusedMsgs++
		in.lastRefusal = err
		return nil, err
	}
	l := in.takeLandingLocked()
	l.p, l.peer = in.posted[0], peer
	copy(in.posted, in.posted[1:]) // in place: no allocation in steady state
	in.posted[len(in.posted)-1] = posted{}
	in.posted = in.posted[:len(in.posted)-1]
	in.reserved++
	return l, nil
}

func (in *Inbox) takeLandingLocked() *landing {
	if k := len(in.free); k > 0 {
		l := in.free[k-1]
		in.free = in.free[:k-1]
		l.done = false
		return l
	}
	return &landing{in: in}
}

// landing is a receive buffer taken for one message.
type landing struct {
	in   *Inbox
	p    posted
	peer uint64
	done bool // under in.mu
}

func (l *landing) Mem() []byte { return l.p.ref.Bytes() }

func (l *landing) Done(n int, imm uint32, hasImm bool, err error) {
	in := l.in
	in.mu.Lock()
	defer in.mu.Unlock()
	if l.done {
		in.faults = append(in.faults, errors.New("landing done twice"))
		return
	}
	l.done = true
	in.reserved--
	p := l.p
	l.p = posted{}
	in.free = append(in.free, l)
	if err != nil || n < 0 || uint64(n) > p.h.Length {
		if err == nil {
			in.faults = append(in.faults, fmt.Errorf("landing done with %d bytes of %d", n, p.h.Length))
		}
		in.posted = append(in.posted, posted{})
		copy(in.posted[1:], in.posted)
		in.posted[0] = p // back to the front
		return
	}
	h, _ := p.h.Slice(0, uint64(n))
	mem := p.ref.Bytes()[:n]
	p.ref.Release()
	m := Message{Peer: l.peer, Buffer: h, Mem: mem, Imm: imm, HasImm: hasImm}
	if in.msgCheck != nil {
		if err := in.msgCheck(m); err != nil {
			in.faults = append(in.faults, fmt.Errorf("message of %d bytes: %w", n, err))
		}
	}
	in.msgs <- m // a slot was reserved
}

// Refused returns the events and messages refused, and the last refusal.
func (in *Inbox) Refused() (events, messages uint64, last error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.refusedEvents, in.refusedMsgs, in.lastRefusal
}

// Fault returns the faults seen (a failed check, a landing done twice),
// joined; nil if none.
func (in *Inbox) Fault() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return errors.Join(in.faults...)
}

// Close gives the posted receive buffers back. Idempotent; the Inbox
// refuses nothing afterwards by itself: Stop* does.
func (in *Inbox) Close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i := range in.posted {
		in.posted[i].ref.Release()
	}
	in.posted = in.posted[:0]
}
