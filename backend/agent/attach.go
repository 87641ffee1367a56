package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// attach runs the attach handshake with the agent at cfg.Socket (package
// agentwire's doc) and returns the attachment, its loops not started. It
// refuses an agent that fails any step: a bad packet is ErrProtocol, a
// refusal the agent's gone (its code's sentinel). It speaks
// agentwire.Version, and agentwire.MinVersion to an agent that refuses
// that version (an older one): the version it returns.
func attach(ctx context.Context, cfg *Config) (*net.UnixConn, agentwire.Welcome, byte, error) {
	conn, w, err := attachAs(ctx, cfg, agentwire.Version)
	var r refusedError
	if err != nil && errors.As(err, &r) && errors.Is(err, rdmamgr.ErrVersion) {
		conn, w, err = attachAs(ctx, cfg, agentwire.MinVersion)
		return conn, w, agentwire.MinVersion, err
	}
	return conn, w, agentwire.Version, err
}

func attachAs(ctx context.Context, cfg *Config, version byte) (*net.UnixConn, agentwire.Welcome, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	conn, err := agentwire.Dial(ctx, cfg.Socket)
	if err != nil {
		return nil, agentwire.Welcome{}, err
	}
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) }) // ctx cancelled early
	defer stop()
	w, err := handshake(ctx, conn, cfg, version)
	if err != nil {
		if g, gerr := goneOf(err); gerr == nil {
			agentwire.WritePacket(conn, g) // best effort: say why
		}
		conn.Close()
		return nil, agentwire.Welcome{}, fmt.Errorf("attach to host agent %s: %w", cfg.Socket, err)
	}
	conn.SetDeadline(time.Time{})
	return conn, w, nil
}

func handshake(ctx context.Context, conn *net.UnixConn, cfg *Config, version byte) (agentwire.Welcome, error) {
	buf := make([]byte, agentwire.MaxPacket)
	pkt, err := read(conn, buf, agentwire.TypeHello)
	if err != nil {
		return agentwire.Welcome{}, err
	}
	h, err := agentwire.DecodeHello(pkt)
	if err != nil {
		return agentwire.Welcome{}, err
	}
	pid := uint32(os.Getpid())
	a := agentwire.Auth{Version: version, PID: pid, ManagerID: cfg.ManagerID, Addr: cfg.Addr,
		MAC: agentwire.AuthMAC(cfg.Secret, h.Nonce, pid, cfg.ManagerID, cfg.Addr)}
	if pkt, err = a.Encode(); err != nil {
		return agentwire.Welcome{}, err
	}
	if err := agentwire.WritePacket(conn, pkt); err != nil {
		return agentwire.Welcome{}, err
	}
	if pkt, err = read(conn, buf, agentwire.TypeShmPrepare); err != nil {
		return agentwire.Welcome{}, err
	}
	info, err := agentwire.DecodeInfo(agentwire.TypeShmPrepare, pkt)
	if err != nil {
		return agentwire.Welcome{}, err
	}
	// Our shm backend checks the agent as any initiator (host, uid, pid
	// from the kernel at its socket) and marks the route as our agent's.
	ans, err := wiring.SHMAcceptAgentRoute(cfg.SHM, ctx, h.AgentID, info)
	if err != nil {
		return agentwire.Welcome{}, fmt.Errorf("our shm backend refused the agent's route: %w", err)
	}
	if pkt, err = agentwire.EncodeInfo(agentwire.TypeShmAccept, ans); err != nil {
		return agentwire.Welcome{}, err
	}
	if err := agentwire.WritePacket(conn, pkt); err != nil {
		return agentwire.Welcome{}, err
	}
	if pkt, err = read(conn, buf, agentwire.TypeWelcome); err != nil {
		return agentwire.Welcome{}, err
	}
	w, err := agentwire.DecodeWelcome(pkt)
	if err == nil && w.AgentID != h.AgentID {
		err = fmt.Errorf("agent id %016x in welcome, %016x in hello: %w", w.AgentID, h.AgentID, rdmamgr.ErrProtocol)
	}
	return w, err
}

// read reads the next handshake packet, of type want, or the agent's gone
// (returned as its error).
func read(conn *net.UnixConn, buf []byte, want byte) ([]byte, error) {
	pkt, err := agentwire.ReadPacket(conn, buf)
	if err != nil {
		return nil, err
	}
	typ, err := agentwire.Type(pkt)
	if err != nil {
		return nil, err
	}
	switch typ {
	case want:
		return pkt, nil
	case agentwire.TypeGone:
		g, err := agentwire.DecodeGone(pkt)
		if err != nil {
			return nil, err
		}
		return nil, refusedError{g.Err()}
	}
	return nil, fmt.Errorf("agent sent message type %d, want %d: %w", typ, want, rdmamgr.ErrProtocol)
}

// refusedError is the agent's refusal: nothing to answer it with.
type refusedError struct{ error }

func (e refusedError) Unwrap() error { return e.error }

// goneOf returns the gone packet that tells the agent why we give up.
func goneOf(err error) ([]byte, error) {
	var r refusedError
	if errors.As(err, &r) {
		return nil, r
	}
	code := backend.Code(err)
	if code == 0 {
		code = backend.Code(rdmamgr.ErrProtocol)
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	g := agentwire.Gone{Code: uint32(code), Reason: sanitize(msg)}
	return g.Encode()
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c >= 0x7f {
			b[i] = '?'
		}
	}
	return string(b)
}

// attachment is one attach session with the agent: the socket, the
// operations in flight on it and the routes bound to it. It ends when the
// socket does (the agent went, or said gone, or broke the protocol):
// then every route on it fails and every operation in flight fails with
// ErrPeerGone ("host agent gone").
type attachment struct {
	b    *Backend
	conn *net.UnixConn
	w    agentwire.Welcome
	// version is the agentwire version spoken: asks need 3.
	version byte

	mu sync.Mutex // guards the fields below; cond waits on it
	// cond is signalled when a sender took the batches (room in them),
	// when it stops sending, and when the attachment ends.
	cond    *sync.Cond
	ops     map[uint64]*inflight // posted and not completed, by wrid
	next    uint64               // the last wrid given
	routes  map[*route]struct{}
	posts   agentwire.Batch // records waiting to be sent
	cancels agentwire.Batch
	// writing: a goroutine holds the send token (flushLocked); sendPosts
	// and sendCancels are then its own, the batches it swapped out.
	// stuck: a poster met a full socket and handed the token to writer.
	writing, stuck         bool
	sendPosts, sendCancels agentwire.Batch
	ended                  bool
	err                    error // why it ended
	writeErr               error // why a write failed (the reader's end says it)
	// going: the agent said gone, or our write failed; the attachment
	// takes no more posts and ends when the socket does (the agent
	// closes it once it touches none of our memory), CloseTimeout at
	// most from then. It is why it ended.
	going error
	// asks wait for the agent's answer, by id (overOf); lastAsk is
	// the last id given.
	asks    map[uint32]chan byte
	lastAsk uint32

	snd  *agentwire.Sender // the token holder's writes that never wait (nil: conn closed)
	kick chan struct{}     // a.stuck: the writer takes over (capacity 1)
	done chan struct{}     // closed when ended and every op was failed
	wg   sync.WaitGroup    // the reader and the writer
}

// inflight is one posted operation.
type inflight struct {
	wr        *backend.WorkRequest
	r         *route
	bounce    *bounce // the bounce region of a revoked local region, or nil
	cancelled bool    // a cancel record was sent
}

func newAttachment(b *Backend, conn *net.UnixConn, w agentwire.Welcome, version byte) *attachment {
	a := &attachment{b: b, conn: conn, w: w, version: version, asks: make(map[uint32]chan byte), ops: make(map[uint64]*inflight), routes: make(map[*route]struct{}),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	a.snd, _ = agentwire.NewSender(conn) // fails only on a closed conn: then writes fail
	a.cond = sync.NewCond(&a.mu)
	a.posts.Start(agentwire.TypePost)
	a.cancels.Start(agentwire.TypeCancel)
	a.sendPosts.Start(agentwire.TypePost)
	a.sendCancels.Start(agentwire.TypeCancel)
	a.wg.Add(2)
	go a.reader()
	go a.writer()
	return a
}

// reader completes operations as the agent's done batches arrive, until
// the socket ends.
func (a *attachment) reader() {
	defer a.wg.Done()
	rcv, err := agentwire.NewReceiver(a.conn, make([]byte, agentwire.MaxPacket))
	if err != nil {
		a.end(err)
		return
	}
	var dones []agentwire.Done
	for {
		pkt, err := rcv.Read()
		if err != nil {
			a.mu.Lock()
			if a.writeErr != nil {
				err = fmt.Errorf("write to the agent: %w", a.writeErr)
			}
			a.mu.Unlock()
			a.end(err)
			return
		}
		typ, err := agentwire.Type(pkt)
		switch {
		case err != nil:
		case typ == agentwire.TypeDone:
			if dones, err = agentwire.DecodeDones(pkt, dones); err == nil {
				err = a.complete(dones)
			}
		case typ == agentwire.TypeAnswer && a.version >= 3:
			var ans agentwire.Answer
			if ans, err = agentwire.DecodeAnswer(pkt); err == nil {
				a.answered(ans)
			}
		case typ == agentwire.TypeGone:
			g, gerr := agentwire.DecodeGone(pkt)
			if err = gerr; err == nil {
				// The agent answers what it runs for us, then closes.
				a.mu.Lock()
				a.goAwayLocked(g.Err())
				a.mu.Unlock()
				continue
			}
		default:
			err = fmt.Errorf("agent sent message type %d: %w", typ, rdmamgr.ErrProtocol)
		}
		if err != nil {
			a.end(err)
			return
		}
	}
}

// goAwayLocked makes the attachment end once the agent closes the socket,
// which it does only when it can touch none of our memory: an operation
// in flight is reported with the agent's answer, or ErrPeerGone at the
// end, never before (reported means finished). Our write side closes (the
// agent ends us, if it had not started), no post is taken and nothing is
// sent any more, and the wait is bounded by CloseTimeout (then the socket
// is closed as a dead agent's). The first cause is why it ended. Called
// with a.mu held.
func (a *attachment) goAwayLocked(cause error) {
	if a.going != nil || a.ended {
		return
	}
	a.going = cause
	a.cond.Broadcast()
	// Its routes are over (they refuse posts; what is in flight completes
	// as the agent answers it), failed as the agent's, not as their
	// targets' (a PEER_GONE answer of the stopping agent's).
	err := fmt.Errorf("agent: %s: %v: %w", errAgentGone, cause, rdmamgr.ErrPeerGone)
	for r := range a.routes {
		r.fail(err)
	}
	a.conn.CloseWrite()
	a.conn.SetReadDeadline(time.Now().Add(a.b.cfg.CloseTimeout))
}
