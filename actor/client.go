package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/control"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// Client is a typed client of one manager actor, local or remote. Its
// methods build the request, wait for the reply within ctx (or the default
// timeout) and turn wire errors into Go errors wrapping sentinels.
type Client struct {
	sys     *protoactor.ActorSystem
	pid     *protoactor.PID
	local   *Manager // set when the manager is in this process
	timeout time.Duration
	maxMsg  int
}

// NewClient returns a client of the manager at pid, sending from sys (an
// actor system without a manager of its own, or a program's own system)
// with the default request timeout and message limit. From a node,
// node.Node.ClientOf gives one that keeps its manager's limits.
func NewClient(sys *protoactor.ActorSystem, pid *protoactor.PID) *Client {
	return &Client{sys: sys, pid: pid, timeout: defaultRequestTimeout, maxMsg: control.DefaultMaxMessageSize}
}

// PID returns the manager's PID.
func (c *Client) PID() *protoactor.PID { return c.pid }

// request sends msg and waits for a reply of type T.
func request[T proto.Message](ctx context.Context, c *Client, msg proto.Message) (T, error) {
	var zero T
	if n := proto.Size(msg); n > c.maxMsg {
		return zero, fmt.Errorf("%s %s: %d bytes, limit %d (--max-message-size): %w", verb(msg), pidString(c.pid), n, c.maxMsg, rdmamgr.ErrMessageTooLarge)
	}
	if err := checkReply(c.sys.Address(), c.pid.Address); err != nil {
		return zero, fmt.Errorf("%s %s: %w", verb(msg), pidString(c.pid), err)
	}
	timeout := c.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return zero, fmt.Errorf("%s %s: %w", verb(msg), pidString(c.pid), context.DeadlineExceeded)
	}
	// A client of a manager in this process fails at once when the manager
	// is closed: protoactor drops requests still queued when an actor stops,
	// so their futures would only end at the timeout.
	var closed <-chan struct{}
	if c.local != nil {
		closed = c.local.stop
		select {
		case <-closed:
			return zero, fmt.Errorf("%s %s: %w", verb(msg), pidString(c.pid), rdmamgr.ErrClosed)
		default:
		}
	}
	var res struct {
		v   any
		err error
	}
	res.v, res.err = askReply(ctx, c.sys, c.pid, msg, timeout, closed)
	switch {
	case errors.Is(res.err, errAskStopped):
		return zero, fmt.Errorf("%s %s: %w", verb(msg), pidString(c.pid), rdmamgr.ErrClosed)
	case res.err != nil && ctx.Err() != nil:
		return zero, fmt.Errorf("%s %s: %w", verb(msg), pidString(c.pid), ctx.Err())
	}
	if errors.Is(res.err, protoactor.ErrDeadLetter) {
		if why := control.UnreachableOf(c.sys).Why(c.pid.Address); why != nil {
			// Nothing could be sent: the transport says why, at once.
			return zero, fmt.Errorf("%s %s: cannot reach %s: %v: %w", verb(msg), pidString(c.pid), c.pid.Address, why, rdmamgr.ErrUnknownPeer)
		}
		// No actor under that PID (never was, or stopped): not a timeout.
		return zero, fmt.Errorf("%s %s: no such manager: %w", verb(msg), pidString(c.pid), rdmamgr.ErrUnknownPeer)
	}
	if res.err != nil {
		return zero, fmt.Errorf("%s %s: no answer within %v: %w", verb(msg), pidString(c.pid), timeout.Round(time.Millisecond), rdmamgr.ErrTimeout)
	}
	switch v := res.v.(type) {
	case T:
		return v, nil
	case *rdmapb.ErrorReply:
		return zero, fmt.Errorf("%s %s: %w", verb(msg), pidString(c.pid), toError(v.Error))
	}
	return zero, fmt.Errorf("%s %s: reply %T: %w", verb(msg), pidString(c.pid), res.v, rdmamgr.ErrBadResponse)
}

// Ping checks the manager is alive and returns its id.
func (c *Client) Ping(ctx context.Context) (uint64, error) {
	r, err := request[*rdmapb.Pong](ctx, c, &rdmapb.Ping{})
	if err != nil {
		return 0, err
	}
	return r.ManagerId, nil
}

// RequestBuffer asks the manager for size bytes of registered memory that
// remote peers may use with access. WithLease gives it a lease; WithMemory
// registers the caller's own memory instead of allocating; WithDevice
// allocates it in a CUDA device's memory (the handle's Location says so).
// A reply it refuses (a handle that does not decode, or at another
// Location than asked: rdmamgr.ErrBadResponse) has the buffer it names
// released at the owner first, best effort and bounded, so it does not
// leak there.
func (c *Client) RequestBuffer(ctx context.Context, size uint64, access buffer.Access, opts ...BufferOption) (buffer.Buffer, error) {
	var o bufferOptions
	for _, f := range opts {
		f(&o)
	}
	if o.inPlace {
		return c.registerInPlace(ctx, size, access, o)
	}
	if !o.loc.Valid() {
		return buffer.Buffer{}, fmt.Errorf("request buffer at %v: %w", o.loc, rdmamgr.ErrInvalid)
	}
	req := &rdmapb.RequestBuffer{Size: size, Access: uint32(access), Location: uint32(o.loc)}
	if o.leased {
		if o.lease <= 0 {
			return buffer.Buffer{}, fmt.Errorf("request buffer: lease %v: %w", o.lease, rdmamgr.ErrInvalid)
		}
		req.LeaseMs = max(uint64(o.lease/time.Millisecond), 1)
	}
	r, err := request[*rdmapb.RequestBufferResponse](ctx, c, req)
	if err != nil {
		return buffer.Buffer{}, err
	}
	if err := toError(r.Error); err != nil {
		return buffer.Buffer{}, fmt.Errorf("request buffer of %d bytes from %s: %w", size, pidString(c.pid), err)
	}
	b, err := buffer.FromProto(r.Buffer)
	if err != nil {
		c.releaseRefused(ctx, r.Buffer, access)
		return buffer.Buffer{}, fmt.Errorf("request buffer from %s: reply: %w: %w", pidString(c.pid), rdmamgr.ErrBadResponse, err)
	}
	if b.Location != o.loc {
		c.releaseRefused(ctx, r.Buffer, access)
		return buffer.Buffer{}, fmt.Errorf("request buffer at %v from %s: reply at %v: %w", o.loc, pidString(c.pid), b.Location, rdmamgr.ErrBadResponse)
	}
	return b, nil
}

// releaseRefusedTimeout bounds releaseRefused.
const releaseRefusedTimeout = 2 * time.Second

// releaseRefused releases at the owner, best effort, the buffer a
// RequestBuffer reply this client refuses (ErrBadResponse) names, so it
// does not leak there: the owner allocated it before answering. Release
// reads only the owner, region and key, so the rest of the handle is made
// valid (host, the requested access, no lease). Bounded by
// releaseRefusedTimeout even if ctx is done; its outcome is not reported
// (the caller gets the refusal).
func (c *Client) releaseRefused(ctx context.Context, p *rdmapb.Buffer, access buffer.Access) {
	if p == nil || p.OwnerId == 0 || p.Region == 0 || len(p.Key) != buffer.KeySize || !access.Valid() {
		return // names nothing the owner could have allocated
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseRefusedTimeout)
	defer cancel()
	h := &rdmapb.Buffer{OwnerId: p.OwnerId, OwnerAddr: p.OwnerAddr, Region: p.Region, Key: p.Key, Access: uint32(access)}
	_, _ = request[*rdmapb.ReleaseBufferResponse](rctx, c, &rdmapb.ReleaseBuffer{Buffer: h})
}

// A BufferOption refines RequestBuffer.
type BufferOption func(*bufferOptions)

type bufferOptions struct {
	leased bool
	lease  time.Duration
	// inPlace and mem: WithMemory.
	inPlace bool
	mem     []byte
	loc     buffer.Location // WithDevice
}

// WithDevice allocates the buffer in the memory of a device (a
// buffer.Location: buffer.CUDA(n) for CUDA device n; buffer.Host is the
// default), pooled per device at the owner. The handle's Location says
// where it is, and it keeps every rule of a buffer (key, access, lease,
// revocation, release). A manager without a CUDA driver
// (node.Config.CUDA) refuses it with rdmamgr.ErrNotSupported saying why;
// an invalid Location fails with rdmamgr.ErrInvalid. Manager.Bytes has
// no host bytes of it (ErrNotSupported): which data paths move it is in
// the package doc of memreg and the README ("GPU memory").
func WithDevice(loc buffer.Location) BufferOption {
	return func(o *bufferOptions) { o.loc = loc }
}

// WithLease gives the buffer a lease (> 0) on the owner's clock, capped by
// the owner's Config.MaxLease: once it passes without a RenewLease, remote
// access ends (rdmamgr.ErrExpired) and the owner reclaims the buffer.
func WithLease(lease time.Duration) BufferOption {
	return func(o *bufferOptions) { o.leased, o.lease = true, lease }
}

// WithMemory registers p itself, in place, rather than memory the manager
// allocates: size must be len(p), and p stays pinned and registered until
// the buffer is released (ReleaseBuffer), so the caller must not reuse it
// before. Registering the same memory with the same access again shares
// one registration (each RequestBuffer is matched by one ReleaseBuffer).
// Only a client of a manager in this process (Manager.Client,
// node.Node.Client) registers memory in place: elsewhere rdmamgr.ErrNotLocal.
// It takes no lease (rdmamgr.ErrInvalid with WithLease).
func WithMemory(p []byte) BufferOption {
	return func(o *bufferOptions) { o.inPlace, o.mem = true, p }
}

// registerInPlace is RequestBuffer with WithMemory: the local manager's
// registry registers o.mem, without a round trip through the actor.
func (c *Client) registerInPlace(ctx context.Context, size uint64, access buffer.Access, o bufferOptions) (buffer.Buffer, error) {
	switch {
	case c.local == nil:
		return buffer.Buffer{}, fmt.Errorf("request buffer in place: %w", rdmamgr.ErrNotLocal)
	case uint64(len(o.mem)) != size:
		return buffer.Buffer{}, fmt.Errorf("request buffer of %d bytes in place of %d: %w", size, len(o.mem), rdmamgr.ErrInvalid)
	case o.leased:
		return buffer.Buffer{}, fmt.Errorf("request buffer in place with a lease: %w", rdmamgr.ErrInvalid)
	case o.loc != buffer.Host:
		return buffer.Buffer{}, fmt.Errorf("request buffer in place at %v: registering device memory is not built: %w", o.loc, rdmamgr.ErrNotSupported)
	}
	if err := ctx.Err(); err != nil {
		return buffer.Buffer{}, err
	}
	b, err := c.local.reg.Register(o.mem, access)
	if err != nil {
		return buffer.Buffer{}, fmt.Errorf("request buffer in place: %w", err)
	}
	return b, nil
}

// ReleaseBuffer releases a buffer at its owner; it returns once no byte of
// the region can be touched any more.
func (c *Client) ReleaseBuffer(ctx context.Context, b buffer.Buffer) error {
	r, err := request[*rdmapb.ReleaseBufferResponse](ctx, c, &rdmapb.ReleaseBuffer{Buffer: b.Proto()})
	if err != nil {
		return err
	}
	if err := toError(r.Error); err != nil {
		return fmt.Errorf("release buffer %v at %s: %w", b, pidString(c.pid), err)
	}
	return nil
}

// RequestQueuePair asks the local manager for a queue pair to the manager at
// peer. The manager sets up (or reuses) the route; the returned handle moves
// data without going through the actor.
func (c *Client) RequestQueuePair(ctx context.Context, peer *protoactor.PID) (*queuepair.QueuePair, error) {
	if c.local == nil {
		return nil, fmt.Errorf("request_queue_pair: %w", rdmamgr.ErrNotLocal)
	}
	if peer == nil {
		return nil, fmt.Errorf("request_queue_pair without peer: %w", rdmamgr.ErrInvalid)
	}
	req := &rdmapb.RequestQueuePair{Peer: &rdmapb.ManagerRef{Address: peer.Address, Id: peer.Id}}
	if dl, ok := ctx.Deadline(); ok {
		// The manager must answer before our deadline, or the caller gets
		// a bare context error instead of its classified one (for an
		// unreachable peer, ErrUnknownPeer): leave it a margin.
		left := time.Until(dl)
		left -= min(left/10, 500*time.Millisecond)
		req.TimeoutMs = uint64(max(left.Milliseconds(), 1))
	}
	r, err := request[*rdmapb.RequestQueuePairResponse](ctx, c, req)
	if err != nil {
		return nil, err
	}
	if err := toError(r.Error); err != nil {
		return nil, fmt.Errorf("request queue pair to %s: %w", pidString(peer), err)
	}
	return c.local.takeQueuePair(r.QpId)
}

// Status returns the manager's buffers, routes and counters.
func (c *Client) Status(ctx context.Context) (*rdmapb.StatusResponse, error) {
	r, err := request[*rdmapb.StatusResponse](ctx, c, &rdmapb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	return r, toError(r.Error)
}

// RenewLease extends b's lease by lease from now on the owner's clock and
// returns the lease granted (capped by the owner's MaxLease).
func (c *Client) RenewLease(ctx context.Context, b buffer.Buffer, lease time.Duration) (time.Duration, error) {
	ms := max(uint64(lease/time.Millisecond), 1)
	r, err := request[*rdmapb.RenewLeaseResponse](ctx, c, &rdmapb.RenewLease{Buffer: b.Proto(), LeaseMs: ms})
	if err != nil {
		return 0, err
	}
	if err := toError(r.Error); err != nil {
		return 0, fmt.Errorf("renew lease of %v at %s: %w", b, pidString(c.pid), err)
	}
	return time.Duration(r.LeaseMs) * time.Millisecond, nil
}

// RevokeBuffer stops remote access to b at its owner. It returns once no
// remote request can touch the buffer any more; later requests fail with
// rdmamgr.ErrRevoked.
func (c *Client) RevokeBuffer(ctx context.Context, b buffer.Buffer) error {
	r, err := request[*rdmapb.RevokeBufferResponse](ctx, c, &rdmapb.RevokeBuffer{Buffer: b.Proto()})
	if err != nil {
		return err
	}
	if err := toError(r.Error); err != nil {
		return fmt.Errorf("revoke %v at %s: %w", b, pidString(c.pid), err)
	}
	return nil
}

// verb says what a request does, for errors: "request buffer from".
func verb(msg proto.Message) string {
	switch msg.(type) {
	case *rdmapb.RequestBuffer:
		return "request buffer from"
	case *rdmapb.ReleaseBuffer:
		return "release buffer at"
	case *rdmapb.RenewLease:
		return "renew lease at"
	case *rdmapb.RevokeBuffer:
		return "revoke buffer at"
	case *rdmapb.RequestQueuePair:
		return "request queue pair from"
	case *rdmapb.StatusRequest:
		return "status of"
	case *rdmapb.Ping:
		return "ping"
	}
	return "request to"
}
