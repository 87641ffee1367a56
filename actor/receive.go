package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/control"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// managerActor is the actor; its state lives in the Manager.
type managerActor struct{ m *Manager }

// Receive dispatches each message to its handler.
func (a *managerActor) Receive(ctx protoactor.Context) {
	m := a.m
	if m.refuseClosed(ctx) {
		return
	}
	switch msg := ctx.Message().(type) {
	case *protoactor.Started, *protoactor.Stopping, *protoactor.Stopped, *protoactor.Restarting:
	case *rdmapb.Ping:
		ctx.Respond(&rdmapb.Pong{ManagerId: m.id})
	case *rdmapb.RequestBuffer:
		m.onRequestBuffer(ctx, msg)
	case *rdmapb.ReleaseBuffer:
		m.onReleaseBuffer(ctx, msg)
	case *rdmapb.RenewLease:
		m.onRenewLease(ctx, msg)
	case *rdmapb.RevokeBuffer:
		m.onRevokeBuffer(ctx, msg)
	case *rdmapb.RequestQueuePair:
		m.onRequestQueuePair(ctx, msg)
	case *rdmapb.ReleaseQueuePair:
		m.onReleaseQueuePair(ctx, msg)
	case *rdmapb.RouteHandshake:
		m.onRouteHandshake(ctx, msg)
	case *rdmapb.StatusRequest:
		ctx.Respond(m.status())
	default:
		m.book.Refuse(RefusedUnknownType, "unknown message", "type", fmt.Sprintf("%T", msg), "sender", pidString(ctx.Sender()))
		if ctx.Sender() != nil {
			ctx.Respond(&rdmapb.ErrorReply{Error: fromError(fmt.Errorf("message %T: %w", msg, rdmamgr.ErrUnknownMessage))})
		}
	}
}

// isRemote reports whether the message being handled came over the
// network: by the stamp of the guard in front of the gRPC endpoint, never
// by its sender address (package remoteguard).
func isRemote(ctx protoactor.Context) bool { return control.IsRemote(ctx.MessageHeader()) }

// remotePeer names the peer of a remote message, for per-peer caps.
func remotePeer(ctx protoactor.Context) string { return control.Peer(ctx.MessageHeader()) }

func (m *Manager) onRequestBuffer(ctx protoactor.Context, msg *rdmapb.RequestBuffer) {
	remote, peer := isRemote(ctx), remotePeer(ctx)
	b, err := m.allocate(msg, remote, peer)
	if err != nil {
		if errors.Is(err, rdmamgr.ErrLimit) {
			m.book.Refuse(RefusedLimit, "request_buffer refused", "size", msg.Size, "remote", remote, "peer", peer, "err", err)
		}
		ctx.Respond(&rdmapb.RequestBufferResponse{Error: m.replyError(remote, "request_buffer", err)})
		return
	}
	ctx.Respond(&rdmapb.RequestBufferResponse{Buffer: b.Proto()})
}

func (m *Manager) onReleaseBuffer(ctx protoactor.Context, msg *rdmapb.ReleaseBuffer) {
	remote := isRemote(ctx)
	b, err := buffer.FromProto(msg.Buffer)
	if err == nil && b.OwnerID != m.id {
		err = fmt.Errorf("buffer owned by %016x: %w", b.OwnerID, rdmamgr.ErrReleased)
	}
	if err != nil {
		ctx.Respond(&rdmapb.ReleaseBufferResponse{Error: m.replyError(remote, "release_buffer", err)})
		return
	}
	// Release waits for in-flight work: do it off the mailbox.
	m.goReply(ctx.Sender(), func() any {
		rctx, cancel := context.WithTimeout(context.Background(), m.cfg.OpTimeout)
		defer cancel()
		err := m.reg.Release(rctx, b)
		if err == nil {
			m.forgetRemote(b.Region)
		}
		return &rdmapb.ReleaseBufferResponse{Error: m.replyError(remote, "release_buffer", err)}
	})
}

func (m *Manager) onRenewLease(ctx protoactor.Context, msg *rdmapb.RenewLease) {
	b, err := buffer.FromProto(msg.Buffer)
	d := min(time.Duration(msg.LeaseMs)*time.Millisecond, m.cfg.MaxLease)
	if err == nil && msg.LeaseMs == 0 {
		err = fmt.Errorf("renew with a lease of 0 ms: %w", rdmamgr.ErrInvalid)
	}
	if err == nil {
		err = m.reg.SetLease(b, d)
	}
	if err != nil {
		ctx.Respond(&rdmapb.RenewLeaseResponse{Error: m.replyError(isRemote(ctx), "renew_lease", err)})
		return
	}
	ctx.Respond(&rdmapb.RenewLeaseResponse{LeaseMs: uint64(d / time.Millisecond)})
}

func (m *Manager) onRevokeBuffer(ctx protoactor.Context, msg *rdmapb.RevokeBuffer) {
	remote := isRemote(ctx)
	b, err := buffer.FromProto(msg.Buffer)
	if err != nil {
		ctx.Respond(&rdmapb.RevokeBufferResponse{Error: m.replyError(remote, "revoke_buffer", err)})
		return
	}
	m.goReply(ctx.Sender(), func() any {
		rctx, cancel := context.WithTimeout(context.Background(), m.cfg.OpTimeout)
		defer cancel()
		return &rdmapb.RevokeBufferResponse{Error: m.replyError(remote, "revoke_buffer", m.reg.Revoke(rctx, b))}
	})
}

// refuseRemote counts and logs the refusal of what only callers in the
// manager's process get (queue pairs), and returns the error to answer.
// Locality comes from how the request arrived (isRemote), never from its
// sender address.
func (m *Manager) refuseRemote(ctx protoactor.Context, what string) error {
	m.book.Refuse(RefusedNotLocal, what+" from a remote peer refused", "peer", remotePeer(ctx))
	return fmt.Errorf("queue pairs are handed only to callers in the manager's process: %w", rdmamgr.ErrNotLocal)
}

// onRequestQueuePair sets up (or reuses) the route to the named peer off
// the mailbox. A remote peer must not make us set up routes to addresses
// it names: the request is refused to it.
func (m *Manager) onRequestQueuePair(ctx protoactor.Context, msg *rdmapb.RequestQueuePair) {
	if isRemote(ctx) || ctx.Sender() == nil {
		ctx.Respond(&rdmapb.RequestQueuePairResponse{Error: fromError(m.refuseRemote(ctx, "request_queue_pair"))})
		return
	}
	if msg.Peer == nil || msg.Peer.Address == "" || msg.Peer.Id == "" {
		ctx.Respond(&rdmapb.RequestQueuePairResponse{Error: fromError(fmt.Errorf("request_queue_pair without peer: %w", rdmamgr.ErrInvalid))})
		return
	}
	peer := protoactor.NewPID(msg.Peer.Address, msg.Peer.Id)
	timeout := m.cfg.RouteTimeout
	if msg.TimeoutMs > 0 && time.Duration(msg.TimeoutMs)*time.Millisecond < timeout {
		timeout = time.Duration(msg.TimeoutMs) * time.Millisecond
	}
	m.goReply(ctx.Sender(), func() any {
		rctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		e, err := m.getRoute(rctx, peer, 0)
		if err != nil {
			return &rdmapb.RequestQueuePairResponse{Error: fromError(err)}
		}
		id, err := m.newQueuePair(e)
		if err != nil {
			m.dropRef(e)
			return &rdmapb.RequestQueuePairResponse{Error: fromError(err)}
		}
		return &rdmapb.RequestQueuePairResponse{QpId: id, PeerId: e.peerID, Backend: string(e.kind)}
	})
}

// onReleaseQueuePair drops a queue pair by id. Only local callers may: the
// ids are small counters, and a peer that released our queue pairs would
// tear down routes under our callers.
func (m *Manager) onReleaseQueuePair(ctx protoactor.Context, msg *rdmapb.ReleaseQueuePair) {
	var err error
	if isRemote(ctx) {
		err = m.refuseRemote(ctx, "release_queue_pair")
	} else {
		err = m.releaseQP(msg.QpId)
	}
	ctx.Respond(&rdmapb.ReleaseQueuePairResponse{Error: fromError(err)})
}

func (m *Manager) onRouteHandshake(ctx protoactor.Context, msg *rdmapb.RouteHandshake) {
	if isRemote(ctx) && !m.handshakeAllowed(remotePeer(ctx)) {
		m.book.Refuse(RefusedHandshake, "route handshake over the per-peer rate refused", "peer", remotePeer(ctx))
		resp := &rdmapb.RouteHandshakeResponse{Version: ProtocolVersion, ResponderId: m.id, Backend: msg.Backend,
			Error: fromError(fmt.Errorf("more than %d route handshakes in %v (serve --handshakes-per-peer): %w", m.cfg.HandshakesPerPeer, handshakeWindow, rdmamgr.ErrLimit))}
		resp.Mac = replyMAC(m.cfg.Secret, msg.Nonce, resp)
		ctx.Respond(resp)
		return
	}
	ctx.Respond(m.acceptRoute(msg))
}

// refuseClosed answers a request that reaches a closed manager with CLOSED
// and reports whether it did.
func (m *Manager) refuseClosed(ctx protoactor.Context) bool {
	select {
	case <-m.stop:
	default:
		return false
	}
	switch ctx.Message().(type) {
	case *protoactor.Started, *protoactor.Stopping, *protoactor.Stopped, *protoactor.Restarting:
		return false
	}
	if ctx.Sender() != nil {
		ctx.Respond(&rdmapb.ErrorReply{Error: fromError(fmt.Errorf("manager %016x: %w", m.id, rdmamgr.ErrClosed))})
	}
	return true
}

// goReply computes a reply off the mailbox and sends it to sender.
func (m *Manager) goReply(sender *protoactor.PID, f func() any) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		r := f()
		if sender != nil {
			m.sys.Root.Send(sender, r)
		}
	}()
}
