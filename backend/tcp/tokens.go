package tcp

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// Route setup on the backend's side: the initiator's info, and the
// responder's single-use tokens that its data connections must prove
// (server_conn.go takes them back).

// tokenEntry is a token handed out by AcceptRoute, until it is used or
// expires.
type tokenEntry struct {
	peer    uint64
	expires time.Time
}

// PrepareRoute returns the initiator's info: version and connection count.
func (b *Backend) PrepareRoute(ctx context.Context, peerID uint64) (backend.PendingRoute, []byte, error) {
	b.mu.Lock()
	started, closed := b.ln != nil, b.closed
	b.mu.Unlock()
	if closed {
		return nil, nil, rdmamgr.ErrClosed
	}
	if !started {
		return nil, nil, rdmamgr.ErrNotStarted
	}
	return &pendingRoute{b: b, peer: peerID}, encodeInitiatorInfo(b.cfg.ConnsPerRoute), nil
}

// AcceptRoute hands the initiator our data address and single-use tokens.
func (b *Backend) AcceptRoute(ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
	n, err := decodeInitiatorInfo(info)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, rdmamgr.ErrClosed
	}
	if b.ln == nil {
		return nil, rdmamgr.ErrNotStarted
	}
	if b.lnErr != nil {
		return nil, fmt.Errorf("%w: %w", ErrListenerDown, b.lnErr)
	}
	for t, e := range b.tokens {
		if now.After(e.expires) {
			delete(b.tokens, t)
		}
	}
	if len(b.tokens)+n > b.cfg.MaxPendingTokens {
		return nil, fmt.Errorf("tcp: %d route tokens pending: %w", len(b.tokens), rdmamgr.ErrLimit)
	}
	tokens := make([][tokenSize]byte, n)
	for i := range tokens {
		if _, err := rand.Read(tokens[i][:]); err != nil {
			return nil, fmt.Errorf("tcp: token: %w", err)
		}
		b.tokens[tokens[i]] = tokenEntry{peer: peerID, expires: now.Add(b.cfg.TokenTTL)}
	}
	return encodeResponderInfo(b.addr, tokens), nil
}

// takeToken consumes a token (single use) and returns the peer it was
// issued to.
func (b *Backend) takeToken(t [tokenSize]byte) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.tokens[t]
	if !ok {
		return 0, false
	}
	delete(b.tokens, t)
	return e.peer, time.Now().Before(e.expires)
}
