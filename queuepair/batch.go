package queuepair

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Op is one operation of a batch (Submit) or a chain (PostOps): any verb.
type Op struct {
	Op     backend.Op // backend.OpWrite (Put), OpRead (Get), OpWriteImm, OpSend, OpCompareSwap, OpFetchAdd
	Local  buffer.Buffer
	Remote buffer.Buffer // zero for a Send
	// Imm is the immediate value of a PutWithImm, and of a Send with
	// HasImm (SendWithImm).
	Imm    uint32
	HasImm bool
	// Compare and Swap are CompareAndSwap's operands; Swap is FetchAdd's
	// addend.
	Compare, Swap uint64
	// ID is the caller's name of the operation, as verbs' wr_id: the work
	// request it is posted into reports it (WorkRequest.ID), so a program
	// that reaps a completion queue finds its own state without a map.
	ID uint64
	// Unsignaled, for PostOps into a queue pair bound to a completion
	// queue, asks for selective signaling, as verbs' work request without
	// IBV_SEND_SIGNALED: the operation, if it succeeds, is not reported
	// through the queue (only through its WorkRequest: Poll, Err, Wait,
	// Done). A signaled operation posted after it on the same queue pair
	// vouches for it, as RC's in-order completions do in verbs: the queue
	// hands over each signaled operation only once every operation posted
	// before it on the queue pair since the queue pair's first unsignaled
	// one, signaled or not (Submit's aside), is done (its memory let go,
	// its work request free to re-post). A failed unsignaled operation is
	// reported through the queue as any operation is, ahead of the
	// signaled ones that vouch for it. Without a queue, and in Submit, it
	// has no effect. Selective signaling saves the queue's work for the
	// unsignaled operations; on a route that does not copy in the
	// poster's goroutine (TCP, the host agent's) it costs a lock as each
	// operation of the queue pair is posted and finished.
	Unsignaled bool
}

func (o *Op) operands() operands {
	return operands{imm: o.Imm, hasImm: o.HasImm, compare: o.Compare, swap: o.Swap, id: o.ID, unsig: o.Unsignaled}
}

// PutOp builds a Put for Submit or PostOps.
func PutOp(local, remote buffer.Buffer) Op {
	return Op{Op: backend.OpWrite, Local: local, Remote: remote}
}

// GetOp builds a Get for Submit or PostOps.
func GetOp(local, remote buffer.Buffer) Op {
	return Op{Op: backend.OpRead, Local: local, Remote: remote}
}

// PutWithImmOp builds a PutWithImm for Submit or PostOps.
func PutWithImmOp(local, remote buffer.Buffer, imm uint32) Op {
	return Op{Op: backend.OpWriteImm, Local: local, Remote: remote, Imm: imm}
}

// SendOp builds a Send (with hasImm, a SendWithImm) for Submit or PostOps.
func SendOp(local buffer.Buffer, imm uint32, hasImm bool) Op {
	return Op{Op: backend.OpSend, Local: local, Imm: imm, HasImm: hasImm}
}

// CompareAndSwapOp builds a CompareAndSwap for Submit or PostOps.
func CompareAndSwapOp(remote buffer.Buffer, compare, swap uint64) Op {
	return Op{Op: backend.OpCompareSwap, Remote: remote, Compare: compare, Swap: swap}
}

// FetchAddOp builds a FetchAdd for Submit or PostOps.
func FetchAddOp(remote buffer.Buffer, add uint64) Op {
	return Op{Op: backend.OpFetchAdd, Remote: remote, Swap: add}
}

// Submit posts ops that share ctx: its deadline (or the queue pair's
// timeout from now, whichever is earlier) and its cancellation. When ctx
// ends before an operation completed, the operation is cancelled: it
// completes with ctx's error (see WorkRequest.Wait), without anybody having
// to wait for it. It returns at once.
func (q *QueuePair) Submit(ctx context.Context, ops ...Op) *Batch {
	dl := q.deadline()
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	b := &Batch{wrs: make([]*WorkRequest, len(ops))}
	var c context.Context
	if ctx.Done() != nil {
		c = ctx
	}
	b.left.Store(int32(len(ops)))
	for i, o := range ops {
		b.wrs[i] = &WorkRequest{batch: b}
		q.arm(b.wrs[i], o.Op, &o.Local, &o.Remote, dl, c, o.operands())
	}
	if c != nil {
		// Cancel what is still pending when ctx ends (at once if it has).
		stop := context.AfterFunc(ctx, func() {
			cause := ctxCause(ctx)
			for _, w := range b.wrs {
				w.cancel(cause)
			}
		})
		b.watch.Store(&stop)
		if done, _ := b.Poll(); done {
			stop()
		}
	}
	return b
}

// Batch is a set of operations posted together.
type Batch struct {
	wrs   []*WorkRequest
	left  atomic.Int32                // operations not yet completed
	watch atomic.Pointer[func() bool] // stops Submit's ctx watcher
}

// Requests returns the batch's work requests in submission order. They
// belong to the batch: posting one again (PostPut, PostOps...) panics, as
// the batch's context watcher and Cancel would still act on it.
func (b *Batch) Requests() []*WorkRequest { return b.wrs }

// Wait waits for every operation and returns their errors joined. When ctx
// ends first, the operations still pending are cancelled and Wait returns
// once none of them can touch local memory (see WorkRequest.Wait).
func (b *Batch) Wait(ctx context.Context) error {
	var errs []error
	for i, w := range b.wrs {
		if !finished(w.settled()) && ctx.Err() != nil {
			cause := ctxCause(ctx)
			for _, rest := range b.wrs[i:] {
				rest.cancel(cause)
			}
		}
		if err := w.Wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	b.unwatch()
	return errors.Join(errs...)
}

// unwatch stops Submit's ctx watcher once every operation completed.
func (b *Batch) unwatch() {
	if stop := b.watch.Load(); stop != nil {
		(*stop)()
	}
}

// Cancel cancels every pending operation of the batch, waits until none can
// touch local memory and returns their errors joined.
func (b *Batch) Cancel() error {
	cause := fmt.Errorf("queuepair: %w", context.Canceled)
	for _, w := range b.wrs {
		w.cancel(cause)
	}
	var errs []error
	for _, w := range b.wrs {
		if err := w.Cancel(); err != nil {
			errs = append(errs, err)
		}
	}
	b.unwatch()
	return errors.Join(errs...)
}

// Poll reports whether every operation completed, and their joined errors.
func (b *Batch) Poll() (bool, error) {
	var errs []error
	for _, w := range b.wrs {
		done, err := w.Poll()
		if !done {
			return false, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return true, errors.Join(errs...)
}
