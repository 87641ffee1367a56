//go:build linux

package hostagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// postQueue bounds the posts read and not yet posted, per process: the
// reader waits past it (the process's socket then fills: back-pressure).
const postQueue = 4096

// proc is one attached process.
type proc struct {
	a     *Agent
	conn  *net.UnixConn
	pid   uint32
	uid   uint32
	id    uint64 // its manager's id: the Origin of its operations
	addr  string // its manager's actor address
	slot  uint16
	gen   uint32
	route backend.Route     // our shm route to it
	pr    wiring.ProxyRoute // route, mapping its regions

	ctx   context.Context // ends when the process starts going
	stop  context.CancelFunc
	posts chan *op // read, in order, for the poster
	// queued counts the posts handed to the poster and not yet started:
	// the reader starts one itself only when none is (order).
	queued atomic.Int64
	dead   chan struct{} // closed when the process starts going
	// notices wait for the deliverer (inbox.go), at most noticeQueue;
	// staged counts the bytes of their messages.
	notices chan notice
	staged  atomic.Int64
	wake    chan struct{} // the writer has dones to send (1 buffered)
	endOnce sync.Once
	endErr  error          // why it went; set before dead is closed
	loops   sync.WaitGroup // reader's helpers: poster, writer, cut watcher, deliverer

	mu sync.Mutex // guards the fields below
	// ops are the operations posted and not yet reported, by wrid.
	ops map[uint64]*op
	// opsDone is closed when ops empties after dead (end waits on it).
	opsDone chan struct{}
	// proxies are its regions mapped as proxies, by its region id.
	proxies map[uint64]*proxy
	// out are the dones queued; wout the ones the send token's holder
	// sends; writing: someone holds the token; stuck: a completing
	// goroutine could not write and handed the token to the writer.
	out, wout      []agentwire.Done
	writing, stuck bool
	// noticesOver: the deliverer ended; notices are refused.
	noticesOver bool
	wbatch      agentwire.Batch // the token holder's, inline
	snd         *agentwire.Sender
	// farFails counts the far-route setups that failed for it since
	// farFailStart (far.go: farBudget).
	farFails     int
	farFailStart time.Time
	asks         atomic.Int32 // asks being answered (ask.go)
}

func newProc(a *Agent, c *net.UnixConn, auth *agentwire.Auth, uid uint32, r backend.Route) *proc {
	p := &proc{a: a, conn: c, pid: auth.PID, uid: uid, id: auth.ManagerID, addr: auth.Addr,
		route: r, pr: r.(wiring.ProxyRoute), posts: make(chan *op, postQueue),
		dead: make(chan struct{}), wake: make(chan struct{}, 1), notices: make(chan notice, noticeQueue.Load()),
		ops: make(map[uint64]*op), proxies: make(map[uint64]*proxy)}
	p.snd, _ = agentwire.NewSender(c) // fails only on a closed conn: the writer's writes fail
	p.ctx, p.stop = context.WithCancel(a.life)
	p.pr.OnCut(p.onCut)
	// run's four goroutines count from now: end may run (Close) before
	// run starts them, and waits for them.
	p.loops.Add(4)
	return p
}

// run serves the process until it goes: this goroutine reads its
// packets; a poster posts its operations in order, a writer sends dones.
func (p *proc) run() {
	go p.poster()
	go p.writer()
	go p.deliverer() // inbox.go
	go func() {      // the shm route ending means the process went
		defer p.loops.Done()
		select {
		case <-p.route.Done():
			p.end(fmt.Errorf("hostagent: shm route of pid %d ended: %v: %w", p.pid, p.route.Err(), rdmamgr.ErrPeerGone))
		case <-p.dead:
		}
	}()
	err := p.read()
	p.end(err)
	p.loops.Wait()
}

// read reads posts and cancels until the socket ends or a packet is bad.
func (p *proc) read() error {
	rcv, err := agentwire.NewReceiver(p.conn, make([]byte, agentwire.MaxPacket))
	if err != nil {
		return fmt.Errorf("hostagent: pid %d: %v: %w", p.pid, err, rdmamgr.ErrPeerGone)
	}
	var posts []agentwire.Post
	var cancels []uint64
	var wrs []*backend.WorkRequest
	var fast []*op // posted by this goroutine, on one far route
	for {
		pkt, err := rcv.Read()
		if err != nil {
			return fmt.Errorf("hostagent: pid %d: %v: %w", p.pid, err, rdmamgr.ErrPeerGone)
		}
		t, err := agentwire.Type(pkt)
		if err != nil {
			return err
		}
		switch t {
		case agentwire.TypePost:
			if posts, err = agentwire.DecodePosts(pkt, posts); err != nil {
				return err
			}
			// In order: straight onto the route when nothing waits for
			// the poster and nothing needs waiting for (a run of them on
			// one route posted as one chain), else behind what the
			// poster has.
			var ffr backend.Route
			for i := range posts {
				o, err := p.newOp(&posts[i])
				if err != nil {
					if len(fast) > 0 {
						postList(ffr, fast, wrs)
					}
					return err
				}
				if o.refused != nil {
					o.finish(o.refused)
					continue
				}
				if p.queued.Load() == 0 {
					if fr, ok := o.prepareFast(); ok {
						if fr != nil {
							if ffr != fr && len(fast) > 0 {
								wrs = postList(ffr, fast, wrs)
								fast = fast[:0]
							}
							ffr, fast = fr, append(fast, o)
						}
						continue
					}
				}
				if len(fast) > 0 {
					wrs = postList(ffr, fast, wrs)
					fast = fast[:0]
				}
				if err := p.enqueue(o); err != nil {
					return err
				}
			}
			if len(fast) > 0 {
				wrs = postList(ffr, fast, wrs)
			}
			clear(fast)
			fast = fast[:0]
		case agentwire.TypeCancel:
			if cancels, err = agentwire.DecodeCancels(pkt, cancels); err != nil {
				return err
			}
			for _, wrid := range cancels {
				p.cancel(wrid, context.Canceled)
			}
		case agentwire.TypeAsk:
			q, err := agentwire.DecodeAsk(pkt)
			if err != nil {
				return err
			}
			p.ask(q)
		case agentwire.TypeGone:
			g, err := agentwire.DecodeGone(pkt)
			if err != nil {
				return err
			}
			return fmt.Errorf("hostagent: pid %d detached: %w", p.pid, g.Err())
		default:
			return fmt.Errorf("hostagent: message type %d after attach: %w", t, rdmamgr.ErrProtocol)
		}
	}
}

// enqueue hands o to the poster, behind what it has; an error once the
// process is going (o is reported with it). A post queued once end and
// the poster have drained the queue would stay there, unreported, and
// end waits for it: so the queue is drained again here when the process
// went meanwhile (select takes either of two ready cases).
func (p *proc) enqueue(o *op) error {
	p.queued.Add(1)
	select {
	case p.posts <- o:
	case <-p.dead:
		p.queued.Add(-1)
		o.finish(p.endErr)
		return p.endErr
	}
	select {
	case <-p.dead:
		p.drainPosts(p.endErr)
		return p.endErr
	default:
		return nil
	}
}

// writer sends the dones a completing goroutine could not (the socket
// was full: it handed over the send token), until the process is gone and
// every done was sent. Whoever holds the token (p.writing) sends: a
// completing goroutine inline, without waiting on the socket, or this
// goroutine, which may wait.
func (p *proc) writer() {
	defer p.loops.Done()
	var b agentwire.Batch
	for {
		select {
		case <-p.wake:
		case <-p.dead:
			// end waits for every op before closing the socket's write
			// side: once the token is free (or ours), send what is left.
			p.mu.Lock()
			done := p.opsDone
			p.mu.Unlock()
			<-done
			for {
				p.mu.Lock()
				if p.stuck || !p.writing {
					p.stuck, p.writing = false, true
					p.wout = append(p.wout, p.out...)
					p.out = p.out[:0]
					p.mu.Unlock()
					p.flush(&b, p.wout)
					return
				}
				p.mu.Unlock()
				<-p.wake // the holder kicks when it lets go while dead
			}
		}
		p.mu.Lock()
		if !p.stuck {
			p.mu.Unlock()
			continue
		}
		p.stuck = false // the token is ours
		failed := false
		for len(p.wout) > 0 {
			p.mu.Unlock()
			ok := p.flush(&b, p.wout)
			p.mu.Lock()
			if !ok {
				failed = true
				break
			}
			p.wout, p.out = p.out, p.wout[:0]
		}
		p.wout = p.wout[:0]
		p.writing = false
		p.kickIfDead()
		p.mu.Unlock()
		if failed {
			p.end(fmt.Errorf("hostagent: pid %d: write failed: %w", p.pid, rdmamgr.ErrPeerGone))
		}
	}
}

// kickIfDead wakes the writer's last flush when the token is let go
// after the process started going. Called with p.mu held.
func (p *proc) kickIfDead() {
	if p.opsDone == nil {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// sendLocked sends the dones queued, inline, unless someone sends already
// (they send these too): it takes the send token and writes batches
// without waiting on the socket until none is queued; should the socket
// be full, the token and the dones not sent go to the writer goroutine.
// Called and returns with p.mu held.
func (p *proc) sendLocked() {
	if p.writing {
		return
	}
	p.writing = true
	for len(p.out) > 0 {
		p.wout, p.out = p.out, p.wout[:0]
		p.mu.Unlock()
		n := p.tryFlush(p.wout)
		p.mu.Lock()
		if n < len(p.wout) { // the socket is full, or failed: the writer meets its error
			p.wout = append(p.wout[:0], p.wout[n:]...)
			p.stuck = true // the token stays taken: the writer's now
			select {
			case p.wake <- struct{}{}:
			default:
			}
			return
		}
		p.wout = p.wout[:0]
	}
	p.writing = false
	p.kickIfDead()
}

// tryFlush sends out in batches without waiting on the socket; it returns
// how many dones went (fewer when the socket is full or failed).
func (p *proc) tryFlush(out []agentwire.Done) int {
	if p.snd == nil || (testHookSocketFull != nil && testHookSocketFull()) {
		return 0
	}
	b := &p.wbatch
	sent := 0
	for sent < len(out) {
		b.Start(agentwire.TypeDone)
		n := 0
		for _, d := range out[sent:] {
			err := b.AddDone(d)
			if errors.Is(err, agentwire.ErrFull) {
				break
			}
			if err != nil {
				p.a.log.Error("done not encodable", "err", err)
			}
			n++
		}
		if b.Count() > 0 {
			if ok, err := p.snd.TryWrite(b.Packet()); err != nil || !ok {
				return sent
			}
		}
		sent += n
	}
	return sent
}

// testHookSocketFull, when set by a test and true, makes an inline send
// find the socket full (the writer goroutine then sends).
var testHookSocketFull func() bool

// flush sends out in batches; false if the socket failed.
func (p *proc) flush(b *agentwire.Batch, out []agentwire.Done) bool {
	b.Start(agentwire.TypeDone)
	send := func() bool {
		if b.Count() == 0 {
			return true
		}
		p.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		err := agentwire.WritePacket(p.conn, b.Packet())
		b.Start(agentwire.TypeDone)
		return err == nil
	}
	for _, d := range out {
		err := b.AddDone(d)
		if errors.Is(err, agentwire.ErrFull) {
			if !send() {
				return false
			}
			err = b.AddDone(d)
		}
		if err != nil {
			p.a.log.Error("done not encodable", "err", err)
		}
	}
	return send()
}

// end makes the process go (once): its slot is dropped, its operations
// cancelled with ErrPeerGone and waited for, its proxies released, its
// shm route and socket closed. It returns at once when called again.
func (p *proc) end(why error) {
	p.endOnce.Do(func() {
		p.endErr = why
		p.a.dropSlot(p)
		p.mu.Lock()
		p.opsDone = make(chan struct{})
		if len(p.ops) == 0 {
			close(p.opsDone)
		}
		ops := make([]*op, 0, len(p.ops))
		for _, o := range p.ops {
			ops = append(ops, o)
		}
		done := p.opsDone
		p.mu.Unlock()
		close(p.dead)
		p.stop()
		p.conn.CloseRead() // the reader stops
		goneErr := fmt.Errorf("hostagent: process gone: %w", rdmamgr.ErrPeerGone)
		for _, o := range ops {
			o.cancel(goneErr)
		}
		p.drainPosts(goneErr)
		<-done
		p.releaseProxies()
		p.route.Close()
		p.a.log.Info("process detached", "pid", p.pid, "slot", p.slot, "why", why)
		p.a.wg.Add(1)
		go func() { // the writer sends the last dones, then the socket closes
			defer p.a.wg.Done()
			p.loops.Wait()
			p.conn.Close()
		}()
	})
}

// abandon ends a process whose attach failed after newProc: run will not
// start its goroutines.
func (p *proc) abandon(why error) {
	p.loops.Add(-4)
	p.end(why)
}

// goneAndEnd tells the process why it goes, then ends it (Close).
func (p *proc) goneAndEnd(err error, reason string) {
	sendGone(p.conn, err, reason)
	p.end(fmt.Errorf("hostagent: %s: %w", reason, err))
}
