package tcp

import "time"

// setTokenTTL changes the lifetime of tokens handed out by later
// AcceptRoute calls (AcceptRoute reads it under b.mu).
func (b *Backend) setTokenTTL(d time.Duration) {
	b.mu.Lock()
	b.cfg.TokenTTL = d
	b.mu.Unlock()
}
