package actor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// ProtocolVersion is the version of the manager-to-manager handshake.
const ProtocolVersion = 1

// handshakeAttempt bounds one try of the route handshake.
const handshakeAttempt = 2 * time.Second

// maxNonces bounds the replay cache; past it new handshakes are refused
// until old nonces expire.
const maxNonces = 1 << 16

// replayWindow is how long a handshake nonce is remembered. A replay after
// it gains nothing: the tokens it yields are useless without the secret,
// which every data connection proves against a fresh server nonce.
const replayWindow = 10 * time.Minute

const (
	labelHandshake = "rdmamgr route handshake v1"
	labelReply     = "rdmamgr route reply v1"
)

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// handshakeFields are what a handshake's MAC covers, in order: the one list
// the initiator signs and the responder verifies.
func handshakeFields(hs *rdmapb.RouteHandshake) [][]byte {
	return [][]byte{u64(uint64(hs.Version)), u64(hs.InitiatorId), []byte(hs.InitiatorAddr),
		[]byte(hs.Backend), hs.Endpoint, hs.Nonce}
}

// replyFields are what a handshake reply's MAC covers, bound to the
// handshake's nonce: the one list the responder signs and the initiator
// verifies.
func replyFields(nonce []byte, r *rdmapb.RouteHandshakeResponse) [][]byte {
	return [][]byte{nonce, u64(uint64(r.Version)), u64(r.ResponderId), []byte(r.Backend), r.Endpoint,
		u64(uint64(codeOf(r.Error)))}
}

func handshakeMAC(s backend.Secret, hs *rdmapb.RouteHandshake) []byte {
	return s.MAC(labelHandshake, handshakeFields(hs)...)
}

func handshakeVerifies(s backend.Secret, hs *rdmapb.RouteHandshake) bool {
	return s.Verify(hs.Mac, labelHandshake, handshakeFields(hs)...)
}

func replyMAC(s backend.Secret, nonce []byte, r *rdmapb.RouteHandshakeResponse) []byte {
	return s.MAC(labelReply, replyFields(nonce, r)...)
}

func replyVerifies(s backend.Secret, nonce []byte, r *rdmapb.RouteHandshakeResponse) bool {
	return s.Verify(r.Mac, labelReply, replyFields(nonce, r)...)
}

func codeOf(e *rdmapb.Error) rdmapb.Code {
	if e == nil {
		return rdmapb.Code_OK
	}
	return e.Code
}

// handshake sets up a route to e's peer over b: the initiator's side.
func (m *Manager) handshake(ctx context.Context, e *routeEntry, b backend.Backend) (backend.Route, uint64, error) {
	pr, info, err := b.PrepareRoute(ctx, 0)
	if err != nil {
		return nil, 0, &setupError{what: fmt.Sprintf("prepare %s route to %s", b.Kind(), e.key), cause: err}
	}
	resp, nonce, err := m.askHandshake(ctx, e, b.Kind(), info)
	if err == nil {
		err = m.checkReply(e, b.Kind(), nonce, resp)
	}
	if err != nil {
		pr.Abort()
		return nil, 0, err
	}
	r, err := pr.Complete(ctx, resp.Endpoint)
	if err != nil {
		return nil, 0, &setupError{what: fmt.Sprintf("connect %s route to %s", b.Kind(), e.key), cause: err}
	}
	return r, resp.ResponderId, nil
}

// askHandshake sends the signed handshake to e's peer and returns its
// reply and the nonce it answers. A message sent to a peer in the instant
// it dies (before protoactor notices) is lost without a trace, so the
// handshake is retried in short attempts, each with a fresh nonce, within
// ctx.
func (m *Manager) askHandshake(ctx context.Context, e *routeEntry, kind backend.Kind, info []byte) (*rdmapb.RouteHandshakeResponse, []byte, error) {
	if err := checkReply(m.sys.Address(), e.peer.Address); err != nil {
		return nil, nil, fmt.Errorf("handshake with %s: %w", e.key, err)
	}
	for {
		hs := &rdmapb.RouteHandshake{
			Version:       ProtocolVersion,
			InitiatorId:   m.id,
			InitiatorAddr: m.sys.Address(),
			Backend:       string(kind),
			Endpoint:      info,
			Nonce:         backend.Nonce(),
		}
		hs.Mac = handshakeMAC(m.cfg.Secret, hs)
		attempt := handshakeAttempt
		if dl, ok := ctx.Deadline(); ok {
			attempt = min(attempt, time.Until(dl))
		}
		if attempt <= 0 {
			return nil, nil, fmt.Errorf("handshake with %s: %w: %w", e.key, rdmamgr.ErrUnknownPeer, context.DeadlineExceeded)
		}
		res, err := askReply(ctx, m.sys, e.peer, hs, attempt, nil)
		if err == nil {
			resp, err := handshakeReply(e, res)
			return resp, hs.Nonce, err
		}
		if !errors.Is(err, protoactor.ErrTimeout) || ctx.Err() != nil {
			return nil, nil, fmt.Errorf("handshake with %s: %w: %w", e.key, rdmamgr.ErrUnknownPeer, err)
		}
	}
}

// handshakeReply takes res as a handshake reply. Anything else is not an
// answer from a manager that can take routes (a closing manager, another
// kind of actor): to the caller the peer is unreachable. The peer's own
// error is kept as text only, so that its CLOSED is not taken for ours.
func handshakeReply(e *routeEntry, res any) (*rdmapb.RouteHandshakeResponse, error) {
	switch r := res.(type) {
	case *rdmapb.RouteHandshakeResponse:
		return r, nil
	case *rdmapb.ErrorReply:
		return nil, fmt.Errorf("handshake with %s: %w: %v", e.key, rdmamgr.ErrUnknownPeer, toError(r.Error))
	}
	return nil, fmt.Errorf("handshake with %s: reply %T: %w: %w", e.key, res, rdmamgr.ErrUnknownPeer, rdmamgr.ErrBadResponse)
}

// checkReply authenticates the peer's reply to our handshake of nonce and
// checks what it says.
func (m *Manager) checkReply(e *routeEntry, kind backend.Kind, nonce []byte, resp *rdmapb.RouteHandshakeResponse) error {
	if !replyVerifies(m.cfg.Secret, nonce, resp) {
		m.authFailures.Add(1)
		m.log.Warn("route reply failed authentication", "peer", e.key)
		return fmt.Errorf("handshake reply from %s: %w", e.key, rdmamgr.ErrUnauthenticated)
	}
	if err := toError(resp.Error); err != nil {
		return &setupError{what: fmt.Sprintf("%s handshake with %s", kind, e.key), cause: err, byPeer: true}
	}
	if resp.Version != ProtocolVersion {
		return fmt.Errorf("handshake with %s: peer version %d, ours %d: %w", e.key, resp.Version, ProtocolVersion, rdmamgr.ErrVersion)
	}
	if resp.ResponderId == 0 || resp.Backend != string(kind) {
		return fmt.Errorf("handshake with %s: responder id %x backend %q: %w", e.key, resp.ResponderId, resp.Backend, rdmamgr.ErrProtocol)
	}
	return nil
}

// acceptRoute answers a peer's handshake: the responder's side. The reply
// is signed whatever it says.
func (m *Manager) acceptRoute(hs *rdmapb.RouteHandshake) *rdmapb.RouteHandshakeResponse {
	resp := &rdmapb.RouteHandshakeResponse{Version: ProtocolVersion, ResponderId: m.id, Backend: hs.Backend}
	b := m.backendOf(backend.Kind(hs.Backend))
	defer func() { resp.Mac = replyMAC(m.cfg.Secret, hs.Nonce, resp) }()
	if err := m.checkHandshake(hs); err != nil {
		m.authFailures.Add(1)
		m.book.Refuse(RefusedHandshake, "route handshake refused", "initiator", hs.InitiatorAddr, "err", err)
		resp.Error = fromError(err)
		return resp
	}
	switch {
	case hs.Version != ProtocolVersion:
		resp.Error = fromError(fmt.Errorf("handshake version %d, ours %d: %w", hs.Version, ProtocolVersion, rdmamgr.ErrVersion))
	case b == nil:
		resp.Error = fromError(fmt.Errorf("handshake for backend %q, ours %s: %w", hs.Backend, m.kinds(), rdmamgr.ErrNotSupported))
	case hs.InitiatorId == 0:
		resp.Error = fromError(fmt.Errorf("handshake without initiator id: %w", rdmamgr.ErrInvalid))
	default:
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.RouteTimeout)
		defer cancel()
		info, err := b.AcceptRoute(ctx, hs.InitiatorId, hs.Endpoint)
		if err != nil {
			resp.Error = m.replyError(true, "route_handshake", err)
		} else {
			resp.Endpoint = info
			m.inboundUp(hs)
		}
	}
	switch {
	case resp.Error == nil:
	case resp.Error.Code == rdmapb.Code_NOT_SUPPORTED:
		// A backend that does not serve this peer (shm for another host
		// or uid, a backend we do not run): the initiator tries its next
		// one. That is a choice, not a refusal: info, not counted.
		m.log.Info("route handshake declined: backend not for this peer", "initiator", hs.InitiatorAddr, "backend", hs.Backend, "why", resp.Error.Message)
		m.noteRefused(hs.InitiatorId, backend.Kind(hs.Backend), toError(resp.Error))
	default:
		m.book.Refuse(RefusedHandshake, "route handshake refused", "initiator", hs.InitiatorAddr, "err", resp.Error.Message)
	}
	return resp
}

// checkHandshake authenticates a handshake and refuses replays.
func (m *Manager) checkHandshake(hs *rdmapb.RouteHandshake) error {
	if !m.cfg.Secret.Enabled() {
		return nil
	}
	if len(hs.Nonce) != backend.NonceSize {
		return fmt.Errorf("handshake nonce of %d bytes: %w", len(hs.Nonce), rdmamgr.ErrUnauthenticated)
	}
	if !handshakeVerifies(m.cfg.Secret, hs) {
		return fmt.Errorf("handshake MAC does not verify: %w", rdmamgr.ErrUnauthenticated)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := m.nonces[string(hs.Nonce)]; seen {
		return fmt.Errorf("replayed handshake: %w", rdmamgr.ErrUnauthenticated)
	}
	if len(m.nonces) >= maxNonces {
		for n, exp := range m.nonces {
			if now.After(exp) {
				delete(m.nonces, n)
			}
		}
		if len(m.nonces) >= maxNonces {
			return fmt.Errorf("%d handshakes in flight: %w", len(m.nonces), rdmamgr.ErrLimit)
		}
	}
	m.nonces[string(hs.Nonce)] = now.Add(replayWindow)
	return nil
}

type handshakeCount struct {
	start time.Time
	n     int
}

// handshakeAllowed counts a route handshake from peer and reports whether
// it is within HandshakesPerPeer per handshakeWindow. The table is
// bounded: windows that ended are dropped when it grows.
func (m *Manager) handshakeAllowed(peer string) bool {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.handshakes[peer]
	if !ok || now.Sub(w.start) >= handshakeWindow {
		if len(m.handshakes) >= maxNonces {
			for k, v := range m.handshakes {
				if now.Sub(v.start) >= handshakeWindow {
					delete(m.handshakes, k)
				}
			}
			if len(m.handshakes) >= maxNonces {
				return false
			}
		}
		w = handshakeCount{start: now}
	}
	w.n++
	m.handshakes[peer] = w
	return w.n <= m.cfg.HandshakesPerPeer
}
