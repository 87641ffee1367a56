//go:build linux

package test

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

const (
	killedBufSize = 16 << 20
	killedOpSize  = 4 << 20
	killedWorkers = killedBufSize / killedOpSize
	// Operations that complete before the daemon is taken away.
	killAfter = 12
)

// TestPeerKilled takes a daemon away while 4 MiB gets and puts are in
// flight to it, by SIGKILL and by SIGTERM (after which it must still exit
// 0): every operation must end (none hangs), the failed ones with
// rdmamgr.ErrPeerGone (or ErrDeadline), the gets that succeed with the
// right bytes, and later ones on the same queue pair must fail at once. A
// new daemon then works through a new queue pair.
func TestPeerKilled(t *testing.T) {
	t.Run("SIGKILL", func(t *testing.T) { testPeerGone(t, (*daemon).kill) })
	t.Run("SIGTERM", func(t *testing.T) { testPeerGone(t, (*daemon).stop) })
}

func testPeerGone(t *testing.T, takeAway func(*daemon, *testing.T)) {
	checkLocalClean(t)
	r := newRand(t)
	d := startDaemon(t)
	remote := remoteBuffer(t, d, killedBufSize, buffer.AccessReadWrite)
	src, srcMem := localBuffer(t, killedBufSize)
	dst, dstMem := localBuffer(t, killedBufSize)
	qp := queuePair(t, d)

	fill(r, srcMem)
	if err := wait(qp.Put(src, remote)); err != nil {
		t.Fatalf("seed the daemon's buffer: %v", err)
	}

	var ok atomic.Int64
	killed := make(chan struct{})
	type outcome struct {
		okBefore, okAfter int
		err               error // the first failure
	}
	outcomes := make([]outcome, killedWorkers)
	var wg sync.WaitGroup
	for w := range killedWorkers {
		off := uint64(w) * killedOpSize
		l, rm := slice(dst, off, killedOpSize), slice(remote, off, killedOpSize)
		mem, want := dstMem[off:off+killedOpSize], srcMem[off:off+killedOpSize]
		// Workers 0 and 2 get, 1 and 3 put the same bytes back.
		put := w%2 == 1
		if put {
			l = slice(src, off, killedOpSize)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &outcomes[w]
			for {
				var err error
				if put {
					err = wait(qp.Put(l, rm))
				} else {
					clear(mem)
					err = wait(qp.Get(l, rm))
				}
				if err != nil {
					o.err = err
					return
				}
				if !put && !bytes.Equal(mem, want) {
					t.Errorf("worker %d: a get that succeeded brought wrong bytes: %s", w, firstDiff(mem, want))
					return
				}
				select {
				case <-killed:
					o.okAfter++
					if o.okAfter > 1000 {
						t.Errorf("worker %d: operations keep succeeding after the daemon went", w)
						return
					}
				default:
					o.okBefore++
					ok.Add(1)
				}
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for ok.Load() < killAfter {
		select {
		case <-tick.C:
		case <-workersDone:
			t.Fatalf("the workers stopped before the daemon went: %+v", outcomes)
		}
	}
	takeAway(d, t)
	close(killed)
	<-workersDone

	total := 0
	for w, o := range outcomes {
		total += o.okBefore + o.okAfter
		t.Logf("worker %d: %d ops before the daemon went, %d completed after, then: %v", w, o.okBefore, o.okAfter, o.err)
		if o.err != nil && !errors.Is(o.err, rdmamgr.ErrPeerGone) && !errors.Is(o.err, rdmamgr.ErrDeadline) {
			t.Errorf("worker %d: got %v; want rdmamgr.ErrPeerGone or ErrDeadline", w, o.err)
		}
		if errors.Is(o.err, errHung) {
			t.Errorf("worker %d: %v", w, o.err)
		}
	}
	t.Logf("%d 4 MiB gets and puts (%d MiB, gets verified) before the failure", total, total*killedOpSize>>20)

	// The route is down: later operations fail at once, the same way.
	for i, w := range []error{
		wait(qp.Get(slice(dst, 0, killedOpSize), slice(remote, 0, killedOpSize))),
		wait(qp.Put(slice(src, 0, 4096), slice(remote, 0, 4096))),
	} {
		if !errors.Is(w, rdmamgr.ErrPeerGone) && !errors.Is(w, rdmamgr.ErrDeadline) {
			t.Errorf("operation %d after the failure: got %v; want rdmamgr.ErrPeerGone or ErrDeadline", i, w)
		}
	}
	qp.Release()
	if t.Failed() {
		return
	}

	// A new daemon, a new queue pair: verified bytes both ways.
	d2 := startDaemon(t)
	remote2 := remoteBuffer(t, d2, killedBufSize, buffer.AccessReadWrite)
	qp2 := queuePair(t, d2)
	fill(r, srcMem)
	if err := wait(qp2.Put(src, remote2)); err != nil {
		t.Fatalf("put to the new daemon: %v", err)
	}
	fill(r, dstMem)
	if err := wait(qp2.Get(dst, remote2)); err != nil {
		t.Fatalf("get from the new daemon: %v", err)
	}
	if !bytes.Equal(dstMem, srcMem) {
		t.Fatalf("round trip through the new daemon: %s", firstDiff(dstMem, srcMem))
	}
}
