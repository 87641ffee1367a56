package queuepair

import (
	"context"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// operands are what an operation carries beyond its buffers.
type operands struct {
	imm           uint32
	hasImm        bool
	compare, swap uint64
	id            uint64 // Op.ID
	unsig         bool   // Op.Unsignaled
}

// PutWithImm is Put followed, once the bytes are in place at the peer, by
// an event for the peer's subscriber (actor.Manager.SubscribeEvents)
// naming the buffer, offset, length, imm and us. The remote buffer must
// grant AccessWrite and AccessNotify. The operation fails with
// ErrNoReceive when the peer has no subscriber, and with ErrLimit when
// its queue is full (the bytes did land in either case).
func (q *QueuePair) PutWithImm(ctx context.Context, local, remote buffer.Buffer, imm uint32) *WorkRequest {
	return q.newOp(ctx, backend.OpWriteImm, &local, &remote, operands{imm: imm})
}

// Send moves local's bytes into the receive buffer the peer posted next
// (actor.Manager.PostRecv), in order per queue pair's route. It fails with
// ErrNoReceive when none is posted and with ErrReceiveTooSmall when the
// next one is smaller than the message; the peer's subscriber is told of
// either too.
func (q *QueuePair) Send(ctx context.Context, local buffer.Buffer) *WorkRequest {
	return q.newOp(ctx, backend.OpSend, &local, &buffer.Buffer{}, operands{})
}

// SendWithImm is Send with an immediate value delivered with the message.
func (q *QueuePair) SendWithImm(ctx context.Context, local buffer.Buffer, imm uint32) *WorkRequest {
	return q.newOp(ctx, backend.OpSend, &local, &buffer.Buffer{}, operands{imm: imm, hasImm: true})
}

// CompareAndSwap sets the 8-byte word remote names (Length 8, Offset a
// multiple of 8, the buffer granting AccessAtomic) to swap if it equals
// compare, atomically with respect to the owner's sync/atomic and every
// peer; Value returns the word's old value once it completed.
func (q *QueuePair) CompareAndSwap(ctx context.Context, remote buffer.Buffer, compare, swap uint64) *WorkRequest {
	return q.newOp(ctx, backend.OpCompareSwap, &buffer.Buffer{}, &remote, operands{compare: compare, swap: swap})
}

// FetchAdd adds add to the 8-byte word remote names (as CompareAndSwap);
// Value returns the word's old value once it completed.
func (q *QueuePair) FetchAdd(ctx context.Context, remote buffer.Buffer, add uint64) *WorkRequest {
	return q.newOp(ctx, backend.OpFetchAdd, &buffer.Buffer{}, &remote, operands{swap: add})
}

// Value returns the old value of an atomic's word once it completed
// without error (0 otherwise, and for other operations).
func (w *WorkRequest) Value() uint64 {
	if !finished(w.settled()) || w.err != nil {
		return 0
	}
	return w.wr.Result
}

// PostPutWithImm is PutWithImm into a caller-owned, reusable WorkRequest
// (see PostPut): the steady-state data path then allocates nothing.
func (q *QueuePair) PostPutWithImm(ctx context.Context, w *WorkRequest, local, remote buffer.Buffer, imm uint32) {
	q.arm(w, backend.OpWriteImm, &local, &remote, q.deadline(), postCtx(ctx), operands{imm: imm})
}

// PostSend is Send (with hasImm, SendWithImm) into a caller-owned,
// reusable WorkRequest.
func (q *QueuePair) PostSend(ctx context.Context, w *WorkRequest, local buffer.Buffer, imm uint32, hasImm bool) {
	q.arm(w, backend.OpSend, &local, &buffer.Buffer{}, q.deadline(), postCtx(ctx), operands{imm: imm, hasImm: hasImm})
}

// PostCompareAndSwap is CompareAndSwap into a caller-owned, reusable
// WorkRequest; Value gives the old value once it completed.
func (q *QueuePair) PostCompareAndSwap(ctx context.Context, w *WorkRequest, remote buffer.Buffer, compare, swap uint64) {
	q.arm(w, backend.OpCompareSwap, &buffer.Buffer{}, &remote, q.deadline(), postCtx(ctx), operands{compare: compare, swap: swap})
}

// PostFetchAdd is FetchAdd into a caller-owned, reusable WorkRequest.
func (q *QueuePair) PostFetchAdd(ctx context.Context, w *WorkRequest, remote buffer.Buffer, add uint64) {
	q.arm(w, backend.OpFetchAdd, &buffer.Buffer{}, &remote, q.deadline(), postCtx(ctx), operands{swap: add})
}
