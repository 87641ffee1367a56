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
// (server_conn.go takes them back). Tokens expire after TokenTTL; one peer
// holds at most MaxTokensPerPeer, and in a full table a peer holding
// fewer takes the oldest tokens of the one holding the most, so one peer
// (or a few) can never hold every token while others set up routes.

// tokenEntry is a token handed out by AcceptRoute, until it is used or
// expires.
type tokenEntry struct {
	peer            uint64
	agent           bool // the initiator is a host agent (initiatorAgentBit)
	issued, expires time.Time
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
	n := b.cfg.ConnsPerRoute
	if b.cfg.ConnsFor != nil {
		if k := b.cfg.ConnsFor(peerID); k >= 1 && k <= n {
			n = k
		}
	}
	info := encodeInitiatorInfo(n)
	if b.cfg.ClientTLS != nil {
		info = withTLS(info)
	}
	if b.resolver.Load() != nil {
		info = withAgent(info)
	}
	return &pendingRoute{b: b, peer: peerID}, info, nil
}

// AcceptRoute hands the initiator our data address and single-use tokens.
func (b *Backend) AcceptRoute(ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
	n, err := decodeInitiatorInfo(info)
	if err != nil {
		return nil, err
	}
	if theirs, ours := initiatorTLS(info), b.cfg.ServerTLS != nil; theirs != ours {
		return nil, fmt.Errorf("tcp: --data-tls on one side only: the initiator %s, this responder %s: give --data-tls to both ends or neither: %w",
			tlsWord(theirs), tlsWord(ours), rdmamgr.ErrUnauthenticated)
	}
	agent := initiatorAgent(info)
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
			b.dropTokenLocked(t, e)
		}
	}
	if held := b.tokensByPeer[peerID]; held+n > b.cfg.MaxTokensPerPeer {
		return nil, fmt.Errorf("tcp: %d route tokens pending for peer %016x (MaxTokensPerPeer %d): %w",
			held, peerID, b.cfg.MaxTokensPerPeer, rdmamgr.ErrLimit)
	}
	if len(b.tokens)+n > b.cfg.MaxPendingTokens && !b.evictTokensLocked(peerID, n, len(b.tokens)+n-b.cfg.MaxPendingTokens) {
		return nil, fmt.Errorf("tcp: %d route tokens pending: %w", len(b.tokens), rdmamgr.ErrLimit)
	}
	tokens := make([][tokenSize]byte, n)
	for i := range tokens {
		if _, err := rand.Read(tokens[i][:]); err != nil {
			return nil, fmt.Errorf("tcp: token: %w", err)
		}
		b.tokens[tokens[i]] = tokenEntry{peer: peerID, agent: agent, issued: now, expires: now.Add(b.cfg.TokenTTL)}
		b.tokensByPeer[peerID]++
	}
	ans := encodeResponderInfo(b.addr, tokens)
	if agent && b.resolver.Load() != nil { // an agent answering an agent
		ans = withResponderAgent(ans)
	}
	return ans, nil
}

func tlsWord(on bool) string {
	if on {
		return "encrypts its data connections"
	}
	return "does not encrypt its data connections"
}

// takeToken consumes a token (single use) and returns its entry (the
// peer it was issued to).
func (b *Backend) takeToken(t [tokenSize]byte) (tokenEntry, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.tokens[t]
	if !ok {
		return tokenEntry{}, false
	}
	b.dropTokenLocked(t, e)
	return e, time.Now().Before(e.expires)
}

// dropTokenLocked forgets token t (entry e) and counts it out of its
// peer's share.
func (b *Backend) dropTokenLocked(t [tokenSize]byte, e tokenEntry) {
	delete(b.tokens, t)
	if k := b.tokensByPeer[e.peer] - 1; k > 0 {
		b.tokensByPeer[e.peer] = k
	} else {
		delete(b.tokensByPeer, e.peer)
	}
}

// evictTokensLocked makes room in a full table for n more tokens of
// peer, need of them past the cap: it drops the oldest pending tokens of the peer holding the most,
// one at a time, as long as that peer would still hold more than peer
// does with its new ones. It reports whether there is room; a peer that
// holds its share already is refused, never the others.
func (b *Backend) evictTokensLocked(peer uint64, n, need int) bool {
	for ; need > 0; need-- {
		var heavy uint64
		most := 0
		for p, k := range b.tokensByPeer {
			if p != peer && k > most {
				heavy, most = p, k
			}
		}
		if most <= b.tokensByPeer[peer]+n {
			return false
		}
		var oldest [tokenSize]byte
		var oe tokenEntry
		for t, e := range b.tokens {
			if e.peer == heavy && (oe.issued.IsZero() || e.issued.Before(oe.issued)) {
				oldest, oe = t, e
			}
		}
		b.dropTokenLocked(oldest, oe)
		b.lnStats.tokensEvicted.Add(1)
	}
	return true
}
