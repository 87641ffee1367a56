//go:build linux

// TestSoak's workers: each moves random slices to its own buffers at every
// daemon and back, one at a time or batched through Submit, compares every
// byte, and gives up a queue pair that failed.

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// soakWorker moves data to every daemon through its own queue pairs and
// buffers; nothing of it is shared with other workers.
type soakWorker struct {
	id             int
	r              *rand.Rand
	src, dst       buffer.Buffer
	srcMem, dstMem []byte
	conns          []soakConn // by daemon
	putWR, getWR   queuepair.WorkRequest
	// peers: manager ids of the daemons' incarnations this worker moved
	// data with.
	peers map[uint64]*peerSeen
	// routes: the routes its queue pairs used, by daemon.
	routes map[queuepair.Route]int
}

// soakConn is a worker's queue pair and buffer at one daemon.
type soakConn struct {
	qp     *queuepair.QueuePair
	qpGen  int // the daemon's incarnation when the queue pair was asked for
	remote buffer.Buffer
}

// peerSeen: successful operations with one incarnation of a daemon.
type peerSeen struct {
	slot      int
	firstPost time.Time // when the first of them was posted
	ops       int
}

func newSoakWorker(t *testing.T, id int, r *rand.Rand, daemons int) *soakWorker {
	t.Helper()
	w := &soakWorker{id: id, r: r, conns: make([]soakConn, daemons),
		peers: make(map[uint64]*peerSeen), routes: make(map[queuepair.Route]int)}
	w.src, w.srcMem = localBuffer(t, soakLocalSize)
	w.dst, w.dstMem = localBuffer(t, soakLocalSize)
	return w
}

// size returns a transfer size in 1..max, spread evenly over the powers of
// two so that small and unaligned sizes are as common as large ones.
func (w *soakWorker) size(max int) int {
	e := w.r.IntN(22) // 1 B .. 2 MiB
	lo := 1 << e
	n := lo + w.r.IntN(lo)
	return min(n, max)
}

func (w *soakWorker) run(ctx context.Context, s *soakRun) {
	for ctx.Err() == nil {
		si := w.r.IntN(len(s.slots))
		sl := s.slots[si]
		c := &w.conns[si]
		if c.qp == nil {
			gen := sl.gen()
			asked := time.Now()
			qctx, cancel := context.WithTimeout(context.Background(), soakQPTimeout)
			qp, err := local.mgr.Client().RequestQueuePair(qctx, sl.pid)
			cancel()
			if err != nil {
				s.slowControl(time.Since(asked))
				s.fail(sl, gen, "request_queue_pair", err)
				sleepCtx(ctx, 50*time.Millisecond)
				continue
			}
			c.qp, c.qpGen = qp, gen
			w.routes[qp.Route()] = si
		}
		if c.remote.OwnerID != c.qp.PeerID() {
			// No buffer yet, or one of an incarnation that was killed.
			gen := sl.gen()
			asked := time.Now()
			b, err := local.client(sl.pid).RequestBuffer(context.Background(), soakRemoteSize, buffer.AccessReadWrite)
			if err != nil {
				s.slowControl(time.Since(asked))
				s.fail(sl, gen, "request_buffer", err)
				sleepCtx(ctx, 50*time.Millisecond)
				continue
			}
			c.remote = b
			if b.OwnerID != c.qp.PeerID() {
				// The daemon was restarted between the queue pair and
				// the buffer: the queue pair leads to a dead manager.
				c.qp.Release()
				c.qp = nil
				continue
			}
		}
		var ok bool
		if w.r.IntN(3) == 0 {
			ok = w.batch(s, si, c)
			s.batches.Add(1)
		} else {
			ok = w.single(s, si, c)
		}
		if !ok {
			return // an operation hung: its work request cannot be reused
		}
	}
}

// single puts fresh random bytes to a random slice of the daemon's buffer
// and gets them back into a poisoned slice. It returns false when an
// operation hung.
func (w *soakWorker) single(s *soakRun, si int, c *soakConn) bool {
	sl := s.slots[si]
	n := w.size(soakMaxOp)
	ro := w.r.IntN(soakRemoteSize - n + 1)
	so := w.r.IntN(soakLocalSize - n + 1)
	do := w.r.IntN(soakLocalSize - n + 1)
	src, dst := w.srcMem[so:so+n], w.dstMem[do:do+n]
	rb := slice(c.remote, uint64(ro), uint64(n))
	fill(w.r, src) // fresh bytes: a lost put cannot pass
	soakPoison(dst, src)
	posted := time.Now()

	// Half the time through the caller-owned, reused work requests.
	reuse := w.r.IntN(2) == 0
	var put *queuepair.WorkRequest
	if reuse {
		c.qp.PostPut(&w.putWR, slice(w.src, uint64(so), uint64(n)), rb)
		put = &w.putWR
	} else {
		put = c.qp.Put(slice(w.src, uint64(so), uint64(n)), rb)
	}
	if err := wait(put); err != nil {
		return w.opFailed(s, si, c, "put", err)
	}
	s.done(true, n)
	var get *queuepair.WorkRequest
	if reuse {
		c.qp.PostGet(&w.getWR, slice(w.dst, uint64(do), uint64(n)), rb)
		get = &w.getWR
	} else {
		get = c.qp.Get(slice(w.dst, uint64(do), uint64(n)), rb)
	}
	if err := wait(get); err != nil {
		return w.opFailed(s, si, c, "get", err)
	}
	s.done(false, n)
	if !bytes.Equal(dst, src) {
		s.corrupt(sl, fmt.Sprintf("%d bytes remote@%d -> local@%d (put from local@%d)", n, ro, do, so), dst, src)
	}
	w.seen(si, c.qp.PeerID(), posted, 2)
	return true
}

// batch puts k slices in one Submit, then gets them back in another: k
// transfers in flight at once, each at its own stripe of the buffers.
func (w *soakWorker) batch(s *soakRun, si int, c *soakConn) bool {
	sl := s.slots[si]
	k := 2 + w.r.IntN(soakMaxBatch-1)
	rseg, lseg := soakRemoteSize/k, soakLocalSize/k
	type piece struct{ n, ro, so, do int }
	ps := make([]piece, k)
	puts := make([]queuepair.Op, k)
	gets := make([]queuepair.Op, k)
	for i := range ps {
		n := w.size(min(rseg, lseg, soakMaxOp))
		p := piece{n: n, ro: i*rseg + w.r.IntN(rseg-n+1), so: i*lseg + w.r.IntN(lseg-n+1), do: i*lseg + w.r.IntN(lseg-n+1)}
		ps[i] = p
		fill(w.r, w.srcMem[p.so:p.so+n])
		soakPoison(w.dstMem[p.do:p.do+n], w.srcMem[p.so:p.so+n])
		rb := slice(c.remote, uint64(p.ro), uint64(n))
		puts[i] = queuepair.PutOp(slice(w.src, uint64(p.so), uint64(n)), rb)
		gets[i] = queuepair.GetOp(slice(w.dst, uint64(p.do), uint64(n)), rb)
	}
	posted := time.Now()
	for phase, ops := range [][]queuepair.Op{puts, gets} {
		stage := []string{"batch put", "batch get"}[phase]
		var failed error
		for i, wr := range c.qp.Submit(context.Background(), ops...).Requests() {
			err := wait(wr)
			if errors.Is(err, errHung) {
				s.fail(sl, c.qpGen, stage, err)
				return false
			}
			if err != nil {
				s.fail(sl, c.qpGen, stage, err)
				failed = err
				continue
			}
			s.done(phase == 0, ps[i].n)
		}
		if failed != nil {
			w.dropQP(c, failed)
			return true
		}
	}
	for _, p := range ps {
		got, want := w.dstMem[p.do:p.do+p.n], w.srcMem[p.so:p.so+p.n]
		if !bytes.Equal(got, want) {
			s.corrupt(sl, fmt.Sprintf("batched %d bytes remote@%d -> local@%d (put from local@%d)", p.n, p.ro, p.do, p.so), got, want)
		}
	}
	w.seen(si, c.qp.PeerID(), posted, 2*k)
	return true
}

// opFailed records a failed operation and gives up the queue pair; it
// returns false when the operation hung.
func (w *soakWorker) opFailed(s *soakRun, si int, c *soakConn, stage string, err error) bool {
	s.fail(s.slots[si], c.qpGen, stage, err)
	if errors.Is(err, errHung) {
		return false
	}
	w.dropQP(c, err)
	return true
}

// dropQP releases a queue pair that failed; the next operation asks for a
// new one (a new route, if the daemon was restarted).
func (w *soakWorker) dropQP(c *soakConn, err error) {
	c.qp.Release()
	c.qp = nil
	if errors.Is(err, rdmamgr.ErrReleased) {
		c.remote = buffer.Buffer{}
	}
}

func (w *soakWorker) seen(si int, peer uint64, posted time.Time, ops int) {
	p := w.peers[peer]
	if p == nil {
		p = &peerSeen{slot: si, firstPost: posted}
		w.peers[peer] = p
	}
	p.ops += ops
}

// close releases the worker's queue pairs and buffers.
func (w *soakWorker) close(slots []*fixedDaemon) error {
	var errs []error
	for i := range w.conns {
		c := &w.conns[i]
		if c.qp != nil {
			c.qp.Release()
			c.qp = nil
		}
		if c.remote.OwnerID != 0 {
			// A buffer of a killed incarnation is unknown to the daemon's
			// new manager: ErrReleased.
			err := local.client(slots[i].pid).ReleaseBuffer(context.Background(), c.remote)
			if err != nil && !errors.Is(err, rdmamgr.ErrReleased) {
				errs = append(errs, fmt.Errorf("worker %d: release buffer at %s: %w", w.id, slots[i].name, err))
			}
			c.remote = buffer.Buffer{}
		}
	}
	return errors.Join(errs...)
}

// soakPoison sets dst to the complement of want: every byte a get fails to
// write is wrong.
func soakPoison(dst, want []byte) {
	for len(dst) >= 8 {
		binary.LittleEndian.PutUint64(dst, ^binary.LittleEndian.Uint64(want))
		dst, want = dst[8:], want[8:]
	}
	for i := range dst {
		dst[i] = ^want[i]
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
