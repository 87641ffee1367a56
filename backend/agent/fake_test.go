//go:build linux

package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// A fake host agent: it speaks the attach protocol for real (hello, the
// MAC, SO_PEERCRED's pid, the shm handshake with its own shm backend,
// welcome) and runs operations by copying between the registries of the
// test's processes directly (the real agent maps them through shm and
// posts on TCP: that is agd's, tested end to end elsewhere).

// world is what the fake agents of a test share: one another by address,
// the processes' registries by manager id.
type world struct {
	mu     sync.Mutex
	agents map[string]*fakeAgent
	regs   map[uint64]*memreg.Registry
}

func newWorld() *world {
	return &world{agents: map[string]*fakeAgent{}, regs: map[uint64]*memreg.Registry{}}
}

type fakeAgent struct {
	t      testing.TB
	w      *world
	addr   string
	id     uint64
	host   [agentwire.HostIDSize]byte
	path   string
	secret backend.Secret
	shm    *shm.Backend
	l      *net.UnixListener

	mu       sync.Mutex
	slots    map[uint16]uint64 // slot → manager id
	next     uint16
	conns    map[*net.UnixConn]bool
	hold     chan struct{} // non-nil: operations wait until it is closed
	stubborn bool          // a held operation ignores cancels and our end
	// stall, when set, stops its reading of the attach sockets until
	// closed (their buffers fill: the process's writes would wait).
	stall chan struct{}
	// mangle, when set, replaces the next done batch's packet.
	mangle func(pkt []byte) []byte
	posted chan uint64 // each post's wrid as it arrives (buffered)
	dead   bool        // killed: it touches no memory any more
	// postPackets counts the post batches received.
	postPackets int
	// old: it speaks agentwire version 2 only (an agent older than asks):
	// it refuses an auth of version 3 as such an agent does.
	old bool
	// answer, when set, makes the packet answering an ask (nil packet: no
	// answer); unset, asks are answered TCP.
	answer func(q agentwire.Ask) []byte
	asked  int // the asks received
	wg     sync.WaitGroup
}

func startFake(t testing.TB, w *world, path, addr string, host byte, secret backend.Secret) *fakeAgent {
	t.Helper()
	reg := memreg.NewRegistry(0xA6E0+uint64(host), buffer.Limits{})
	sb, err := wiring.NewBackend[*shm.Backend](shm.Config{Secret: secret}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, err := agentwire.Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	a := &fakeAgent{t: t, w: w, addr: addr, id: 0xA6E0 + uint64(host), path: path, secret: secret, shm: sb, l: l,
		slots: map[uint16]uint64{}, conns: map[*net.UnixConn]bool{}, posted: make(chan uint64, 1<<16)}
	a.host[0] = host
	w.mu.Lock()
	w.agents[addr] = a
	w.mu.Unlock()
	a.wg.Add(1)
	go a.accept()
	t.Cleanup(a.kill)
	return a
}

// kill ends the agent as its death would: listener and sockets closed.
func (a *fakeAgent) kill() {
	a.l.Close()
	a.mu.Lock()
	a.dead = true
	for c := range a.conns {
		c.Close()
	}
	if a.hold != nil {
		close(a.hold)
		a.hold = nil
	}
	if a.stall != nil {
		close(a.stall)
		a.stall = nil
	}
	a.mu.Unlock()
	a.wg.Wait()
	a.shm.Close()
}

// holdOps makes operations wait until release.
func (a *fakeAgent) holdOps() {
	a.mu.Lock()
	a.hold = make(chan struct{})
	a.mu.Unlock()
}

func (a *fakeAgent) release() {
	a.mu.Lock()
	if a.hold != nil {
		close(a.hold)
		a.hold = nil
	}
	a.mu.Unlock()
}

func (a *fakeAgent) accept() {
	defer a.wg.Done()
	for {
		c, err := a.l.AcceptUnix()
		if err != nil {
			return
		}
		a.mu.Lock()
		a.conns[c] = true
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer c.Close()
			if err := a.serve(c); err != nil {
				a.t.Logf("fake agent %s: %v", a.addr, err)
			}
		}()
	}
}

func (a *fakeAgent) refuse(c *net.UnixConn, err error) error {
	g := agentwire.Gone{Code: uint32(backend.Code(err)), Reason: "fake agent: " + err.Error()}
	if p, e := g.Encode(); e == nil {
		agentwire.WritePacket(c, p)
	}
	return err
}

func (a *fakeAgent) serve(c *net.UnixConn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	h := agentwire.Hello{Nonce: [agentwire.NonceSize]byte(backend.Nonce()), AgentID: a.id}
	p, _ := h.Encode()
	if err := agentwire.WritePacket(c, p); err != nil {
		return err
	}
	buf := make([]byte, agentwire.MaxPacket)
	pkt, err := agentwire.ReadPacket(c, buf)
	if err != nil {
		return err
	}
	auth, err := agentwire.DecodeAuth(pkt)
	if err != nil {
		return a.refuse(c, err)
	}
	a.mu.Lock()
	old := a.old
	a.mu.Unlock()
	if old && auth.Version != 2 {
		return a.refuse(c, fmt.Errorf("agentwire: version %d, ours 2: %w", auth.Version, rdmamgr.ErrVersion))
	}
	if err := auth.Verify(a.secret, h.Nonce); err != nil {
		return a.refuse(c, err)
	}
	if pid, _, err := agentwire.PeerCred(c); err != nil || uint32(pid) != auth.PID {
		return a.refuse(c, fmt.Errorf("pid %d, auth says %d (%v): %w", pid, auth.PID, err, rdmamgr.ErrUnauthenticated))
	}
	pr, info, err := a.shm.PrepareRoute(context.Background(), auth.ManagerID)
	if err != nil {
		return a.refuse(c, err)
	}
	p, _ = agentwire.EncodeInfo(agentwire.TypeShmPrepare, info)
	agentwire.WritePacket(c, p)
	if pkt, err = agentwire.ReadPacket(c, buf); err != nil {
		pr.Abort()
		return err
	}
	ans, err := agentwire.DecodeInfo(agentwire.TypeShmAccept, pkt)
	if err != nil {
		pr.Abort()
		return a.refuse(c, err)
	}
	sr, err := pr.Complete(context.Background(), ans)
	if err != nil {
		return a.refuse(c, err)
	}
	defer sr.Close()
	if _, ok := sr.(wiring.ProxyRoute); !ok {
		return a.refuse(c, fmt.Errorf("shm route is no ProxyRoute: %w", rdmamgr.ErrInvalid))
	}
	a.mu.Lock()
	a.next++
	slot := a.next
	a.slots[slot] = auth.ManagerID
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.slots, slot)
		delete(a.conns, c)
		a.mu.Unlock()
	}()
	wl := agentwire.Welcome{Slot: slot, Generation: 1, AgentAddr: a.addr, AgentID: a.id, HostID: a.host}
	p, _ = wl.Encode()
	if err := agentwire.WritePacket(c, p); err != nil {
		return err
	}
	c.SetDeadline(time.Time{})
	return a.run(c, auth.ManagerID, buf)
}

// run executes posts in order, one done batch per post batch; cancels
// end a held operation.
func (a *fakeAgent) run(c *net.UnixConn, me uint64, buf []byte) error {
	type job struct{ posts []agentwire.Post }
	jobs := make(chan job, 1024)
	var cmu sync.Mutex
	cancels := map[uint64]chan struct{}{}
	cancelled := map[uint64]bool{}
	var ew sync.WaitGroup
	ew.Add(1)
	go func() { // the executor: each operation on its own (a held one
		// waits for release or its cancel), a done packet each
		defer ew.Done()
		var wmu sync.Mutex
		var ow sync.WaitGroup
		defer ow.Wait()
		for j := range jobs {
			for i := range j.posts {
				p := &j.posts[i]
				cmu.Lock()
				cancel := cancels[p.WRID]
				cmu.Unlock()
				a.mu.Lock()
				hold := a.hold
				cancel = a.unlessStubborn(cancel)
				a.mu.Unlock()
				if hold == nil {
					hold = closedChan
				}
				ow.Add(1)
				go func() {
					defer ow.Done()
					var err error
					var res uint64
					select {
					case <-cancel:
						err = fmt.Errorf("fake: cancelled: %w", rdmamgr.ErrClosed)
					default:
						select {
						case <-hold:
						case <-cancel:
							err = fmt.Errorf("fake: cancelled: %w", rdmamgr.ErrClosed)
						}
					}
					if err == nil {
						res, err = a.exec(me, p)
					}
					cmu.Lock()
					delete(cancels, p.WRID)
					delete(cancelled, p.WRID)
					cmu.Unlock()
					var b agentwire.Batch
					b.Start(agentwire.TypeDone)
					b.AddDone(agentwire.DoneOf(p.WRID, err, res))
					pkt := b.Packet()
					a.mu.Lock()
					if m := a.mangle; m != nil {
						a.mangle = nil
						pkt = m(pkt)
					}
					a.mu.Unlock()
					wmu.Lock()
					agentwire.WritePacket(c, pkt)
					wmu.Unlock()
				}()
			}
		}
	}()
	defer func() {
		close(jobs)
		cmu.Lock()
		for id, ch := range cancels {
			if !cancelled[id] {
				close(ch)
				cancelled[id] = true
			}
		}
		cmu.Unlock()
		ew.Wait()
	}()
	var ids []uint64
	for {
		a.mu.Lock()
		stall := a.stall
		a.mu.Unlock()
		if stall != nil {
			<-stall
		}
		pkt, err := agentwire.ReadPacket(c, buf)
		if err != nil {
			return nil // the process detached or died
		}
		switch pkt[0] {
		case agentwire.TypePost:
			ps, err := agentwire.DecodePosts(pkt, nil)
			if err != nil {
				return a.refuse(c, err)
			}
			a.mu.Lock()
			a.postPackets++
			a.mu.Unlock()
			cmu.Lock()
			for _, p := range ps {
				cancels[p.WRID] = make(chan struct{})
				a.posted <- p.WRID
			}
			cmu.Unlock()
			jobs <- job{posts: ps}
		case agentwire.TypeCancel:
			if ids, err = agentwire.DecodeCancels(pkt, ids); err != nil {
				return a.refuse(c, err)
			}
			cmu.Lock()
			for _, id := range ids {
				if ch := cancels[id]; ch != nil && !cancelled[id] {
					close(ch)
					cancelled[id] = true
				}
			}
			cmu.Unlock()
		case agentwire.TypeAsk:
			q, err := agentwire.DecodeAsk(pkt)
			if err != nil {
				return a.refuse(c, err)
			}
			a.mu.Lock()
			a.asked++
			f, old := a.answer, a.old
			a.mu.Unlock()
			if old {
				return a.refuse(c, fmt.Errorf("message type %d: %w", pkt[0], rdmamgr.ErrProtocol))
			}
			var p []byte
			if f != nil {
				p = f(q)
			} else {
				p, _ = (&agentwire.Answer{ID: q.ID, Backend: agentwire.AnswerTCP}).Encode()
			}
			if p != nil {
				agentwire.WritePacket(c, p)
			}
		default:
			return a.refuse(c, fmt.Errorf("message type %d: %w", pkt[0], rdmamgr.ErrProtocol))
		}
	}
}

// exec runs one operation between the registries directly.
func (a *fakeAgent) exec(me uint64, p *agentwire.Post) (uint64, error) {
	a.mu.Lock()
	dead := a.dead
	a.mu.Unlock()
	if dead {
		return 0, fmt.Errorf("fake: dead: %w", rdmamgr.ErrPeerGone)
	}
	w := a.w
	w.mu.Lock()
	far := w.agents[p.FarAgent]
	local := w.regs[me]
	w.mu.Unlock()
	if far == nil {
		return 0, fmt.Errorf("fake: no agent %s: %w", p.FarAgent, rdmamgr.ErrUnknownPeer)
	}
	if far.id != p.FarAgentID {
		return 0, fmt.Errorf("fake: agent %s is %016x, not %016x: %w", p.FarAgent, far.id, p.FarAgentID, rdmamgr.ErrPeerGone)
	}
	far.mu.Lock()
	target, ok := far.slots[p.Via]
	far.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("fake: no process at slot %d: %w", p.Via, rdmamgr.ErrPeerGone)
	}
	w.mu.Lock()
	remote := w.regs[target]
	w.mu.Unlock()
	rref, err := remote.AcquireRemote(p.Remote.Region, p.Remote.Key, p.Remote.Offset, p.Remote.Length, p.Op.Need())
	if err != nil {
		return 0, err
	}
	defer rref.Release()
	if p.Op.Atomic() {
		w.mu.Lock()
		defer w.mu.Unlock()
		word := rref.Bytes()
		old := binary.LittleEndian.Uint64(word)
		switch {
		case p.Op == backend.OpFetchAdd:
			binary.LittleEndian.PutUint64(word, old+p.Swap)
		case old == p.Compare:
			binary.LittleEndian.PutUint64(word, p.Swap)
		}
		return old, nil
	}
	need := buffer.AccessRead // of our own memory: Put reads it, Get writes it
	if p.Op == backend.OpRead {
		need = buffer.AccessWrite
	}
	lref, err := local.AcquireRemote(p.Local.Region, p.Local.Key, p.Local.Offset, p.Local.Length, need)
	if err != nil {
		return 0, err
	}
	defer lref.Release()
	switch p.Op {
	case backend.OpWrite:
		copy(rref.Bytes(), lref.Bytes())
	case backend.OpRead:
		copy(lref.Bytes(), rref.Bytes())
	default:
		return 0, fmt.Errorf("fake: %v: %w", p.Op, rdmamgr.ErrNotSupported)
	}
	return 0, nil
}
