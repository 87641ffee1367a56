package control

import (
	"sync"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/extensions"
)

// Unreachable notes, per actor system, why the transport last failed to
// reach a peer address (a refused connection, a TLS handshake the peer
// refused, a certificate it did not trust), so that a request that failed
// because nothing could be sent says why instead of "no such manager" or
// a timeout. The transport notes a failure and clears it on the next
// successful connect; a note older than unreachableFresh is ignored.
type Unreachable struct {
	mu    sync.Mutex
	notes map[string]unreachableNote // guarded by mu; by peer address
}

type unreachableNote struct {
	err error
	at  time.Time
}

// unreachableFresh bounds how long a failure explains later requests.
const unreachableFresh = time.Minute

// maxUnreachable bounds the notes kept (the oldest go first).
const maxUnreachable = 1024

var (
	unreachableExtension = extensions.NextExtensionID()
	unreachableMu        sync.Mutex // serialises UnreachableOf's check and register
)

// ExtensionID makes an Unreachable an actor-system extension.
func (u *Unreachable) ExtensionID() extensions.ExtensionID { return unreachableExtension }

// UnreachableOf returns sys's notes, making them on first use.
func UnreachableOf(sys *protoactor.ActorSystem) *Unreachable {
	unreachableMu.Lock()
	defer unreachableMu.Unlock()
	if u, ok := sys.Extensions.Get(unreachableExtension).(*Unreachable); ok {
		return u
	}
	u := &Unreachable{notes: make(map[string]unreachableNote)}
	sys.Extensions.Register(u)
	return u
}

// Note records err as why addr could not be reached; a nil err clears it.
func (u *Unreachable) Note(addr string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err == nil {
		delete(u.notes, addr)
		return
	}
	if len(u.notes) >= maxUnreachable {
		var oldest string
		for a, n := range u.notes {
			if oldest == "" || n.at.Before(u.notes[oldest].at) {
				oldest = a
			}
		}
		delete(u.notes, oldest)
	}
	u.notes[addr] = unreachableNote{err: err, at: time.Now()}
}

// Why returns the recent failure to reach addr, or nil.
func (u *Unreachable) Why(addr string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	n, ok := u.notes[addr]
	if !ok || time.Since(n.at) > unreachableFresh {
		return nil
	}
	return n.err
}
