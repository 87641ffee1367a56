//go:build linux

package shm

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// Post runs a small operation on a region already mapped at once, in the
// caller's goroutine (it is complete when Post returns); anything else
// goes to the route's copier, or to the fallback route for a region that
// is not memfd-backed.
func (r *route) Post(wr *backend.WorkRequest) error {
	if s, ok := deviceLocal(wr); ok { // the caller's device memory: the copier's
		if err := validateDeviceLocal(wr, s); err != nil {
			return err
		}
		if err := r.st.Err(); err != nil {
			return err
		}
		if cause := wr.CancelCause(); cause != nil {
			return routestate.OpError("shm", wr, cause)
		}
		return r.enqueue(wr)
	}
	if err := routestate.ValidateAll("shm", wr); err != nil {
		return err
	}
	if err := r.st.Err(); err != nil {
		return err
	}
	if cause := wr.CancelCause(); cause != nil {
		return routestate.OpError("shm", wr, cause)
	}
	// No deadline check here: an inline copy never waits, and a queued
	// one checks when it starts (reading the clock would cost more than
	// a small copy).
	if wr.Op == backend.OpSend { // through the owner, in order with the other queued operations
		return r.enqueue(wr)
	}
	e := r.cache.get(wr.Remote.Region, wr.Remote.Key)
	switch {
	case e == nil: // first use: the copier maps it
		return r.enqueue(wr)
	case e.fallback:
		r.cache.unref(e)
		return r.postFallback(wr)
	case e.dev != nil: // device memory: the copier stages it
		r.cache.unref(e)
		return r.enqueue(wr)
	case wr.Op.Atomic():
		err := r.atomic(e, wr)
		r.cache.unref(e)
		r.reportInline(wr, err)
		return nil
	case r.inline(wr):
		err := r.copy(e, wr, false)
		r.cache.unref(e)
		r.reportInline(wr, err)
		return nil
	}
	r.cache.unref(e)
	return r.enqueue(wr)
}

// inline reports whether wr is a copy Post runs itself on a mapped region.
func (r *route) inline(wr *backend.WorkRequest) bool {
	return (wr.Op == backend.OpWrite || wr.Op == backend.OpRead) && len(wr.Local) <= r.b.cfg.InlineMax
}

// reportInline reports the outcome of an operation Post ran itself: it
// was never in flight. The reference to the region's entry is gone, so
// nothing of the copy touches memory after this.
func (r *route) reportInline(wr *backend.WorkRequest, err error) {
	r.st.Count(wr, err)
	if ic, ok := wr.Done.(qpbind.InlineCompleter); ok { // a queue pair's: done with one atomic operation
		ic.CompleteInline(wr, err)
		return
	}
	wr.Done.Complete(wr, err)
}

// postFallback hands wr to the fallback route.
func (r *route) postFallback(wr *backend.WorkRequest) error {
	if r.fb == nil {
		return fmt.Errorf("shm: %s of %d bytes: %w", wr.Op, len(wr.Local), ErrNotShareable)
	}
	return r.fb.Post(wr)
}

// finish reports wr's outcome.
func (r *route) finish(wr *backend.WorkRequest, err error) {
	r.st.End(wr, err)
	wr.Done.Complete(wr, err)
}

// enqueue queues wr for the copier, waiting for room (back-pressure)
// until the poster's context, wr's deadline or the route ends.
func (r *route) enqueue(wr *backend.WorkRequest) error {
	select {
	case r.room <- struct{}{}:
	default:
		var dl <-chan time.Time
		if !wr.Deadline.IsZero() {
			t := time.NewTimer(time.Until(wr.Deadline))
			defer t.Stop()
			dl = t.C
		}
		select {
		case r.room <- struct{}{}:
		case <-wr.Cancel:
			cause := wr.CancelCause()
			if cause == nil {
				cause = context.Canceled
			}
			return routestate.OpError("shm", wr, cause)
		case <-dl:
			return routestate.OpError("shm", wr, rdmamgr.ErrDeadline)
		case <-r.st.Done():
			return r.st.Err()
		}
	}
	r.st.Begin()
	r.mu.Lock()
	if err := r.st.Err(); err != nil {
		r.mu.Unlock()
		r.st.Unbegin()
		<-r.room
		return err
	}
	r.queue = append(r.queue, wr)
	r.mu.Unlock()
	r.signal()
	return nil
}

// Cancel ends a queued wr at once; the copier checks the one it runs
// between chunks; a wr on the fallback route is the fallback's.
func (r *route) Cancel(wr *backend.WorkRequest) {
	cause := wr.CancelCause()
	if cause == nil {
		return
	}
	r.mu.Lock()
	for i, q := range r.queue {
		if q == wr {
			r.queue = append(r.queue[:i], r.queue[i+1:]...)
			r.mu.Unlock()
			<-r.room
			r.finish(wr, routestate.OpError("shm", wr, cause))
			return
		}
	}
	cur := r.cur == wr
	r.mu.Unlock()
	if cur {
		select {
		case r.poke <- struct{}{}:
		default:
		}
	}
	if r.fb != nil { // the copier may have handed it over: the fallback ignores a wr it does not have
		r.fb.Cancel(wr)
	}
}
