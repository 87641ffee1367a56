//go:build linux

package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

const (
	detectOpSize  = 2 << 20
	detectWorkers = 4
	detectBufSize = detectWorkers * detectOpSize
	// detectTimeout bounds waiting for a detection; far beyond the TCP
	// backend's PeerTimeout (4 s), so a missing detection fails the test
	// rather than hanging it.
	detectTimeout = 60 * time.Second
)

// TestDetectHungPeer measures how long the test's manager takes to notice
// that a daemon is gone: frozen (SIGSTOP) under an idle queue pair, frozen
// under a get in flight with a long deadline, and killed (SIGKILL) under
// transfers in flight. Each must end in rdmamgr.ErrPeerGone; the times are
// logged, not asserted. After each, the daemon (resumed, or restarted at
// the same address) serves a new queue pair.
func TestDetectHungPeer(t *testing.T) {
	checkLocalClean(t)
	r := newRand(t)
	f := startFixedDaemons(t, 1)[0]
	src, srcMem := localBuffer(t, detectBufSize)
	dst, dstMem := localBuffer(t, detectBufSize)
	env := &detectEnv{r: r, f: f, src: src, dst: dst, srcMem: srcMem, dstMem: dstMem}
	remote := env.remoteBuffer(t)

	t.Run("SIGSTOP-idle", func(t *testing.T) {
		qp := env.queuePair(t)
		env.roundTrip(t, qp, remote, "before SIGSTOP")
		env.stop(t)
		stopped := time.Now()
		state, err := env.waitRouteDown(detectTimeout)
		took := time.Since(stopped)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("idle queue pair: route %q %v after SIGSTOP", state, took.Round(time.Millisecond))
		if err := qp.Route().Err(); !errors.Is(err, rdmamgr.ErrPeerGone) {
			t.Errorf("route error after SIGSTOP: got %v; want rdmamgr.ErrPeerGone", err)
		}
		if err := wait(qp.Get(slice(dst, 0, 4096), slice(remote, 0, 4096))); !errors.Is(err, rdmamgr.ErrPeerGone) {
			t.Errorf("get on the dead route: got %v; want rdmamgr.ErrPeerGone", err)
		}
		qp.Release()
		env.cont(t)
		// The same incarnation, resumed: a new queue pair (a new route)
		// reaches it, and its buffer is intact.
		env.roundTrip(t, env.queuePair(t), remote, "after SIGCONT")
	})

	t.Run("SIGSTOP-in-flight", func(t *testing.T) {
		qp := env.queuePair(t)
		env.roundTrip(t, qp, remote, "before SIGSTOP")
		env.stop(t)
		soakPoison(dstMem[:detectOpSize], srcMem[:detectOpSize])
		ctx, cancel := context.WithTimeout(context.Background(), detectTimeout)
		posted := time.Now()
		w := qp.Submit(ctx, queuepair.GetOp(slice(dst, 0, detectOpSize), slice(remote, 0, detectOpSize))).Requests()[0]
		err := wait(w)
		cancel() // after: cancelling ctx would cancel the get
		took := time.Since(posted)
		t.Logf("get in flight with a %v deadline: failed %v after SIGSTOP: %v", detectTimeout, took.Round(time.Millisecond), err)
		if !errors.Is(err, rdmamgr.ErrPeerGone) {
			t.Errorf("get from the frozen daemon: got %v; want rdmamgr.ErrPeerGone", err)
		}
		for i := range detectOpSize {
			if dstMem[i] != ^srcMem[i] {
				t.Errorf("the failed get wrote local memory: byte %d", i)
				break
			}
		}
		qp.Release()

		// Kill the frozen daemon and restart it at the same address: the
		// test's manager reaches the new manager at the same PID.
		oldPeer := qp.PeerID()
		if err := f.kill(); err != nil {
			t.Fatal(err)
		}
		if err := f.restart(); err != nil {
			t.Fatal(err)
		}
		remote = env.remoteBuffer(t)
		qp2 := env.queuePair(t)
		if qp2.PeerID() == oldPeer {
			t.Errorf("queue pair after the restart leads to the old manager %016x", oldPeer)
		}
		env.roundTrip(t, qp2, remote, "after the restart")
	})

	t.Run("SIGKILL-in-flight", func(t *testing.T) {
		qp := env.queuePair(t)
		env.roundTrip(t, qp, remote, "before SIGKILL")
		fill(r, srcMem)
		if err := wait(qp.Put(src, remote)); err != nil {
			t.Fatalf("seed: %v", err)
		}
		type outcome struct {
			ok     int
			err    error
			failed time.Time
		}
		outcomes := make([]outcome, detectWorkers)
		var okTotal sync.WaitGroup
		okTotal.Add(2 * detectWorkers) // two successes each before the kill
		var wg sync.WaitGroup
		for i := range detectWorkers {
			off := uint64(i * detectOpSize)
			l, rm := slice(dst, off, detectOpSize), slice(remote, off, detectOpSize)
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := &outcomes[i]
				for {
					var err error
					if i%2 == 0 {
						err = wait(qp.Get(l, rm))
					} else {
						err = wait(qp.Put(slice(src, off, detectOpSize), rm))
					}
					if err != nil {
						o.err, o.failed = err, time.Now()
						for n := o.ok; n < 2; n++ {
							okTotal.Done() // failed early: do not block the kill
						}
						return
					}
					if o.ok < 2 {
						okTotal.Done()
					}
					o.ok++
				}
			}()
		}
		okTotal.Wait()
		killed := time.Now()
		if err := f.kill(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		var slowest time.Duration
		for i, o := range outcomes {
			took := o.failed.Sub(killed)
			slowest = max(slowest, took)
			t.Logf("worker %d: %d ops, then failed %v after SIGKILL: %v", i, o.ok, took.Round(time.Microsecond), o.err)
			if !errors.Is(o.err, rdmamgr.ErrPeerGone) {
				t.Errorf("worker %d: got %v; want rdmamgr.ErrPeerGone", i, o.err)
			}
			if took < 0 {
				t.Errorf("worker %d failed before the kill", i)
			}
		}
		t.Logf("SIGKILL with %d transfers of %d MiB in flight: all failed within %v", detectWorkers, detectOpSize>>20, slowest.Round(time.Microsecond))
		qp.Release()

		if err := f.restart(); err != nil {
			t.Fatal(err)
		}
		remote = env.remoteBuffer(t)
		env.roundTrip(t, env.queuePair(t), remote, "after the restart")
	})
}

// detectEnv is what TestDetectHungPeer's steps share.
type detectEnv struct {
	r              *rand.Rand
	f              *fixedDaemon
	src, dst       buffer.Buffer
	srcMem, dstMem []byte
}

// remoteBuffer asks the daemon's running incarnation for a buffer; the
// incarnation frees it when it exits.
func (e *detectEnv) remoteBuffer(t *testing.T) buffer.Buffer {
	t.Helper()
	b, err := local.client(e.f.pid).RequestBuffer(testCtx(t, 30*time.Second), detectBufSize, buffer.AccessReadWrite)
	if err != nil {
		t.Fatalf("%s: request buffer: %v", e.f.name, err)
	}
	return b
}

// queuePair asks the test's manager for a queue pair to the daemon,
// released when the subtest ends.
func (e *detectEnv) queuePair(t *testing.T) *queuepair.QueuePair {
	t.Helper()
	qp, err := local.mgr.Client().RequestQueuePair(testCtx(t, 30*time.Second), e.f.pid)
	if err != nil {
		t.Fatalf("queue pair to %s: %v", e.f.name, err)
	}
	t.Cleanup(qp.Release)
	return qp
}

// roundTrip puts random bytes to the whole remote buffer and gets them
// back into poisoned memory.
func (e *detectEnv) roundTrip(t *testing.T, qp *queuepair.QueuePair, remote buffer.Buffer, when string) {
	t.Helper()
	fill(e.r, e.srcMem)
	soakPoison(e.dstMem, e.srcMem)
	if err := wait(qp.Put(e.src, remote)); err != nil {
		t.Fatalf("put %s: %v", when, err)
	}
	if err := wait(qp.Get(e.dst, remote)); err != nil {
		t.Fatalf("get %s: %v", when, err)
	}
	if !bytes.Equal(e.dstMem, e.srcMem) {
		t.Fatalf("round trip %s: %s", when, firstDiff(e.dstMem, e.srcMem))
	}
}

// stop freezes the daemon and waits until the kernel shows it stopped.
func (e *detectEnv) stop(t *testing.T) {
	t.Helper()
	if err := e.f.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	d := e.f.current()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.p.Pid()))
		if err != nil {
			t.Fatalf("%s: %v", e.f.name, err)
		}
		// pid (comm) state ...
		if s := string(b); strings.LastIndexByte(s, ')') > 0 {
			if st := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(st) > 0 && (st[0] == "T" || st[0] == "t") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not stopped 30 s after SIGSTOP", e.f.name)
		}
		time.Sleep(time.Millisecond)
	}
}

func (e *detectEnv) cont(t *testing.T) {
	t.Helper()
	if err := e.f.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// waitRouteDown polls the test manager's status until its route to the
// daemon is no longer up, and returns the route's state.
func (e *detectEnv) waitRouteDown(timeout time.Duration) (string, error) {
	key := e.f.pid.Address + "/" + e.f.pid.Id
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := local.mgr.Client().Status(ctx)
		cancel()
		if err != nil {
			return "", fmt.Errorf("status of the test's manager: %w", err)
		}
		found := false
		for _, rs := range st.Routes {
			if rs.PeerAddr != key {
				continue
			}
			found = true
			if rs.State != "up" {
				return rs.State, nil
			}
		}
		if !found {
			return "", fmt.Errorf("the test's manager has no route to %s: %v", key, st.Routes)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("route to %s still up %v after SIGSTOP", key, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
