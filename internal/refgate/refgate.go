// Package refgate counts the users of a resource and lets its owner close
// it: once closed, nobody new gets in, and Drained is closed when the last
// user has left. The owner then frees the resource knowing nobody holds it.
//
// Enter and Leave are a compare-and-swap each (retried under contention),
// so a gate sits on data paths: the buffer registry counts the
// references to a region with one, a queue pair its operations in flight.
// The zero Gate is open and empty; a Gate must not be copied after use.
package refgate

import (
	"sync"
	"sync/atomic"
)

// closedBit marks a closed gate in state; the bits below count users.
const closedBit = int64(1) << 62

// Gate is a users count with a door. See the package doc.
type Gate struct {
	// state holds the number of users in its low bits and closedBit once
	// Close ran.
	state atomic.Int64

	chOnce    sync.Once // makes ch
	ch        chan struct{}
	drainOnce sync.Once // closes ch
}

// Enter lets one more user in and reports true, unless the gate is closed.
// Every Enter that reports true is paired with one Leave.
func (g *Gate) Enter() bool { return g.EnterN(1) }

// EnterN lets n users in at once (one compare-and-swap) and reports true,
// unless the gate is closed; they leave with Leave or LeaveN, in any split.
func (g *Gate) EnterN(n int64) bool {
	for {
		s := g.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if g.state.CompareAndSwap(s, s+n) {
			return true
		}
	}
}

// Leave lets one user out; the last one out of a closed gate closes
// Drained. A Leave without its Enter panics and leaves the count as it
// was, because a count that drifts frees memory still in use.
func (g *Gate) Leave() { g.LeaveN(1) }

// LeaveN lets n users out at once; it panics, changing nothing, if fewer
// than n are in.
func (g *Gate) LeaveN(n int64) {
	for {
		s := g.state.Load()
		if s&^closedBit < n {
			panic("refgate: Leave without Enter")
		}
		if g.state.CompareAndSwap(s, s-n) {
			if s-n == closedBit {
				g.drain()
			}
			return
		}
	}
}

// Close stops new users; it reports whether this call closed the gate (a
// second Close reports false). Drained is closed at once if nobody is in.
func (g *Gate) Close() bool {
	for {
		s := g.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if g.state.CompareAndSwap(s, s|closedBit) {
			if s == 0 {
				g.drain()
			}
			return true
		}
	}
}

// Closed reports whether Close has run.
func (g *Gate) Closed() bool { return g.state.Load()&closedBit != 0 }

// Users returns the number of users in.
func (g *Gate) Users() int64 { return g.state.Load() &^ closedBit }

// Drained returns a channel closed once the gate is closed and empty.
func (g *Gate) Drained() <-chan struct{} { return g.channel() }

func (g *Gate) channel() chan struct{} {
	g.chOnce.Do(func() { g.ch = make(chan struct{}) })
	return g.ch
}

func (g *Gate) drain() {
	g.drainOnce.Do(func() { close(g.channel()) })
}
