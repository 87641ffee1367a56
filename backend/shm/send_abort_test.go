//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// A Send that its deadline or a cancel ends between two packets of its
// message fails alone: the owner delivers nothing of it and gives the
// receive buffer back, the route serves on, and the next Send on it is
// delivered whole. (Its deadline once failed the route, and every
// operation on it with it; through a host agent, the process's route.)
func TestSendEndedMidMessageFailsAlone(t *testing.T) {
	for _, how := range []string{"deadline", "cancel"} {
		t.Run(how, func(t *testing.T) {
			p := newPair(t, shmConfig())
			in := &testInbox{events: make(chan backend.Event, 4), got: make(chan []byte, 2)}
			p.b.SetInbox(in)
			const n = 1 << 20 // many packets
			ha, _ := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
			hb, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
			in.mu.Lock()
			in.posted = make([]byte, n)
			in.mu.Unlock()

			// No deadline for the cancel: the abort must leave none behind
			// on the socket either (the route's later writes would time
			// out: SetAbortBound makes that quick to see).
			t.Cleanup(shm.SetAbortBound(100 * time.Millisecond))
			var deadline time.Time
			if how == "deadline" {
				deadline = time.Now().Add(time.Hour)
			}
			wr, release := backendtest.NewWR(t, p.regA, backend.OpSend, ha, buffer.Buffer{}, deadline, nil)
			packets := 0
			t.Cleanup(shm.SetTestHookSendPacket(func(w *backend.WorkRequest) {
				if w != wr {
					return
				}
				if packets++; packets == 1 { // after the message's first packet
					if how == "deadline" {
						w.Deadline = time.Now().Add(-time.Millisecond) // it passed (the copier owns w)
					} else {
						w.RequestCancel(errors.New("test: cancelled mid-message"))
					}
				}
			}))
			err := backendtest.DoWR(t, timeout, p.route, wr)
			release()
			want := rdmamgr.ErrDeadline
			if how == "cancel" {
				want = nil
			}
			if err == nil || (want != nil && !errors.Is(err, want)) {
				t.Fatalf("send %s mid-message: %v", how, err)
			}
			if packets != 1 {
				t.Fatalf("%d packets went, want 1", packets)
			}
			if e := p.route.Err(); e != nil {
				t.Fatalf("the route failed with one send's %s: %v", how, e)
			}
			// Nothing delivered; the owner is ready for the next message.
			select {
			case m := <-in.got:
				t.Fatalf("%d bytes of the ended send delivered", len(m))
			default:
			}
			time.Sleep(200 * time.Millisecond) // past the abort's bound
			small, mem := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
			backendtest.Random(t, mem)
			if err := backendtest.Do(t, timeout, p.route, p.regA, backend.OpWrite, small, hb); err != nil {
				t.Fatalf("a put after it: %v", err)
			}
			in.mu.Lock()
			in.posted = make([]byte, 4096)
			in.mu.Unlock()
			if err := backendtest.Do(t, timeout, p.route, p.regA, backend.OpSend, small, buffer.Buffer{}); err != nil {
				t.Fatalf("the next send: %v", err)
			}
			if got := <-in.got; !bytes.Equal(got, mem) {
				t.Fatal("the next send: wrong bytes")
			}
		})
	}
}

// stallInbox is testInbox whose Recv waits until gate is closed: an owner
// that takes a message's first packet and then stops reading its socket
// for a while.
type stallInbox struct {
	testInbox
	gate chan struct{}
}

func (in *stallInbox) Recv(peer, n uint64) (backend.Landing, error) {
	<-in.gate
	return in.testInbox.Recv(peer, n)
}

// stalledOwner is an agent's route to an owner whose inbox stalls its
// reader at a message (stallInbox: until in.gate is closed), a proxy of
// h (the owner's, notify allowed) open on it, and a receive buffer of n
// bytes posted.
func stalledOwner(t *testing.T, n int) (p *agentPair, in *stallInbox, h buffer.Buffer) {
	t.Helper()
	p = newAgentPair(t, true, shm.Config{})
	in = &stallInbox{testInbox: testInbox{events: make(chan backend.Event, 64), got: make(chan []byte, 2)}, gate: make(chan struct{})}
	p.owner.SetInbox(in)
	h, _ = backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite|buffer.AccessNotify)
	ph, _ := p.mapProxy(t, h, buffer.AccessWrite|buffer.AccessNotify)
	t.Cleanup(func() { releaseProxy(t, p.regA, ph) })
	in.mu.Lock()
	in.posted = make([]byte, n)
	in.mu.Unlock()
	return p, in, h
}

// A Send whose deadline passes while the owner is not reading fails
// alone: another writer of the same socket meanwhile (a host agent's
// Notify, on its own goroutine, here one between each two packets of the
// message until the socket is full) waits for the owner as it would
// without the Send, and the route serves on. (The Send's deadline was set
// on the socket, which the blocked Notify's write met: it failed the
// route, and with it every attached process's operations.)
func TestSendDeadlineSparesOtherWriters(t *testing.T) {
	const n = 4 << 20 // many packets: more than the socket holds
	p, in, h := stalledOwner(t, n)
	ha, _ := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)

	start := time.Now()
	wr, release := backendtest.NewWR(t, p.regA, backend.OpSend, ha, buffer.Buffer{}, start.Add(400*time.Millisecond), nil)
	var notified []chan error
	t.Cleanup(shm.SetTestHookSendPacket(func(w *backend.WorkRequest) {
		if w != wr || time.Since(start) > 250*time.Millisecond {
			return
		}
		// Between two packets: a Notify writes (at once while the socket
		// has room; once it is full, blocked until the owner reads).
		ch := make(chan error, 1)
		notified = append(notified, ch)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			ch <- p.proxy.Notify(ctx, h.Region, 0, 8, 7, origin)
		}()
		time.Sleep(30 * time.Millisecond)
	}))
	sent := make(chan error, 1)
	go func() { sent <- backendtest.DoWR(t, timeout, p.route, wr) }()
	time.Sleep(700 * time.Millisecond) // past the Send's deadline, a Notify waiting for room
	close(in.gate)                     // the owner reads again
	if err := <-sent; !errors.Is(err, rdmamgr.ErrDeadline) {
		t.Fatalf("send past its deadline: %v, want ErrDeadline", err)
	}
	release()
	if len(notified) < 2 {
		t.Fatalf("%d Notifies between the send's packets; the socket never filled", len(notified))
	}
	for i, ch := range notified {
		if err := <-ch; err != nil {
			t.Fatalf("Notify %d of %d beside the stalled send: %v", i+1, len(notified), err)
		}
		if ev := <-in.events; ev.Imm != 7 || ev.Region != h.Region {
			t.Fatalf("event %+v", ev)
		}
	}
	if err := p.route.Err(); err != nil {
		t.Fatalf("the route failed: %v", err)
	}
	select {
	case m := <-in.got:
		t.Fatalf("%d bytes of the ended send delivered", len(m))
	default:
	}
}

// An agent's Notify that finds the socket full waits for room no longer
// than its ctx: it fails alone with the ctx's error while the owner is
// still stalled, and the route serves on. (Its write once waited for the
// owner, whatever its ctx.)
func TestNotifyWaitEndsWithItsCtx(t *testing.T) {
	const n = 4 << 20 // more than the socket holds: it fills while the owner waits
	p, in, h := stalledOwner(t, n)
	ha, mem := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
	backendtest.Random(t, mem)
	wr, release := backendtest.NewWR(t, p.regA, backend.OpSend, ha, buffer.Buffer{}, time.Now().Add(timeout), nil)
	sent := make(chan error, 1)
	go func() { sent <- backendtest.DoWR(t, timeout, p.route, wr) }()
	time.Sleep(200 * time.Millisecond) // the socket is full
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	notified := make(chan error, 1)
	go func() { notified <- p.proxy.Notify(ctx, h.Region, 0, 8, 7, origin) }()
	select {
	case err := <-notified:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Notify on a full socket past its ctx: %v, want its deadline", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Notify still waits for the stalled owner 5 s after its ctx ended")
	}
	if err := p.route.Err(); err != nil {
		t.Fatalf("the route failed: %v", err)
	}
	close(in.gate)
	if err := <-sent; err != nil {
		t.Fatalf("the send: %v", err)
	}
	release()
	if got := <-in.got; !bytes.Equal(got, mem) {
		t.Fatal("the send: wrong bytes")
	}
	if err := p.route.Err(); err != nil {
		t.Fatalf("the route failed: %v", err)
	}
}
