package queuepair

import (
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// The pipeline of a staged operation (stage.go): a worker's slots, each a
// pinned staging buffer, its stream and its inner operation.

// put: device to staging buffers, chunk c+1's copy overlapping the inner
// Puts of chunk c and the depth-1 chunks before it.
func (k *stageWorker) put(w *WorkRequest, span memreg.DeviceSpan) {
	depth := uint64(len(k.slots))
	chunk := uint64(len(k.slots[0].mem))
	n := span.Len
	chunks := (n + chunk - 1) / chunk
	k.fail(k.copyOut(span, 0, chunk))
	for c := uint64(0); c < chunks && k.err == nil; c++ {
		s := &k.slots[c%depth]
		k.fail(k.d.StreamSynchronize(k.ctx, s.stream))
		if k.check(w); k.err != nil {
			break
		}
		off := c * chunk
		k.post(w, s, backend.OpWrite, off, min(chunk, n-off))
		if c+1 < chunks {
			k.await(w, &k.slots[(c+1)%depth]) // its inner Put (chunk c+1-depth) finished
			if k.err == nil {
				k.fail(k.copyOut(span, c+1, chunk))
			}
		}
	}
}

// copyOut queues chunk c's copy from the device into its slot.
func (k *stageWorker) copyOut(span memreg.DeviceSpan, c, chunk uint64) error {
	s := &k.slots[c%uint64(len(k.slots))]
	off := c * chunk
	return k.d.CopyDtoH(k.ctx, s.mem[:min(chunk, span.Len-off)], span.Ptr+cuda.DevicePtr(off), s.stream)
}

// get: inner Gets into the staging buffers, chunk k's copy to the device
// overlapping the inner Gets of the chunks after it.
func (k *stageWorker) get(w *WorkRequest, span memreg.DeviceSpan) {
	depth := uint64(len(k.slots))
	chunk := uint64(len(k.slots[0].mem))
	n := span.Len
	chunks := (n + chunk - 1) / chunk
	for c := uint64(0); c < min(chunks, depth) && k.err == nil; c++ {
		off := c * chunk
		k.post(w, &k.slots[c], backend.OpRead, off, min(chunk, n-off))
	}
	for c := uint64(0); c < chunks && k.err == nil; c++ {
		s := &k.slots[c%depth]
		if k.await(w, s); k.err != nil {
			break
		}
		if k.check(w); k.err != nil { // a cancel between chunks: no more device copies
			break
		}
		off := c * chunk
		k.fail(k.d.CopyHtoD(k.ctx, span.Ptr+cuda.DevicePtr(off), s.mem[:min(chunk, n-off)], s.stream))
		if c+depth < chunks && k.err == nil {
			k.fail(k.d.StreamSynchronize(k.ctx, s.stream)) // the buffer is free again
			if k.check(w); k.err == nil {
				off = (c + depth) * chunk
				k.post(w, s, backend.OpRead, off, min(chunk, n-off))
			}
		}
	}
}

// post posts the inner operation of slot s: m bytes at off of w's remote.
func (k *stageWorker) post(w *WorkRequest, s *stageSlot, op backend.Op, off, m uint64) {
	in := &s.inner
	in.Reset()
	in.Op, in.Local, in.LocalRegion = op, s.mem[:m], s.ref.Region()
	in.Remote = w.wr.Remote
	in.Remote.Offset += off
	in.Remote.Length = m
	in.Deadline, in.Done, in.Cancel = w.wr.Deadline, s, k.stop
	s.busy = true
	if err := k.q.route.Post(in); err != nil {
		s.busy = false
		k.fail(err)
	}
}

// await waits until slot s's inner operation finished (each other one
// that finishes meanwhile is taken in too), cancelling what is in flight
// once w is cancelled or an inner operation failed.
func (k *stageWorker) await(w *WorkRequest, s *stageSlot) {
	for s.busy {
		select {
		case i := <-k.done:
			o := &k.slots[i]
			o.busy = false
			k.fail(o.res)
		case <-k.kick:
			k.check(w)
		}
	}
}

// check fails the pipeline with w's cancel cause, if it has one.
func (k *stageWorker) check(w *WorkRequest) {
	if c := w.wr.CancelCause(); c != nil {
		k.fail(c)
	}
}

// fail records the pipeline's first error (err nil: none) and cancels the
// inner operations in flight.
func (k *stageWorker) fail(err error) {
	if err == nil || k.err != nil {
		return
	}
	k.err = err
	for i := range k.slots {
		if s := &k.slots[i]; s.busy && s.inner.RequestCancel(err) {
			k.q.route.Cancel(&s.inner)
		}
	}
}

// drain waits for every inner operation and both streams.
func (k *stageWorker) drain(w *WorkRequest) {
	for i := range k.slots {
		k.await(w, &k.slots[i])
	}
	for i := range k.slots {
		k.fail(k.d.StreamSynchronize(k.ctx, k.slots[i].stream))
	}
}
