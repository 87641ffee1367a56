//go:build linux

package test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rnode "github.com/rdmamgr/rdmamgr/node"
)

const (
	opWriteImm      = 4
	opSend          = 5
	reqSendSize     = 64 // a send's header: the request header and its operands
	atkRecvBuffers  = 16
	atkRecvSize     = 64 << 10
	atkMsgSize      = 4 << 10
	atkStalledSends = 16
)

// sendFrame encodes a send's header (no immediate).
func sendFrame(length uint32, wrid uint64) []byte {
	b := make([]byte, reqSendSize)
	b[0] = opSend
	binary.LittleEndian.PutUint32(b[4:], length)
	binary.LittleEndian.PutUint64(b[8:], wrid)
	return b
}

// writeImmFrame encodes a write-imm's header: length bytes at the start
// of b, its event covering them.
func writeImmFrame(length uint32, wrid uint64, b buffer.Buffer, imm uint32) []byte {
	h := frame(opWriteImm, length, wrid, b.Region, 0, b.Key)
	e := make([]byte, reqSendSize-reqHeaderSize)
	binary.LittleEndian.PutUint32(e[0:], imm)
	binary.LittleEndian.PutUint64(e[8:], uint64(length))
	return append(h, e...)
}

// atkReceiver is a manager in the test's process that receives messages:
// it posts atkRecvBuffers receive buffers, and a consumer checks each
// message against the pattern its imm names and posts its buffer again.
type atkReceiver struct {
	n        *rnode.Node
	verified atomic.Int64
	bad      atomic.Pointer[error]
	// box takes the PutWithImms; each event is checked against the
	// pattern its imm names (events counts them), and only events into
	// box are expected.
	box    buffer.Buffer
	events atomic.Int64
}

func newReceiver(t *testing.T) *atkReceiver {
	t.Helper()
	n, err := rnode.Start(testCtx(t, 30*time.Second), rnode.Config{Backend: backend.KindTCP})
	if err != nil {
		t.Fatalf("start the receiving node: %v", err)
	}
	r := &atkReceiver{n: n}
	m := n.Manager()
	msgs, err := m.SubscribeMessages(4 * atkRecvBuffers)
	if err != nil {
		t.Fatal(err)
	}
	posted := make(map[uint64]buffer.Buffer)
	for range atkRecvBuffers {
		b, err := m.Client().RequestBuffer(testCtx(t, 30*time.Second), atkRecvSize, buffer.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		posted[b.Region] = b
		if err := m.PostRecv(b); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := m.SubscribeEvents(4 * atkRecvBuffers)
	if err != nil {
		t.Fatal(err)
	}
	r.box, err = m.Client().RequestBuffer(testCtx(t, 30*time.Second), atkMsgSize, buffer.AccessWrite|buffer.AccessNotify)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev := range evs.C {
			mem, err := m.Bytes(r.box)
			if err == nil && (ev.Region != r.box.Region || ev.Length != atkMsgSize) {
				err = fmt.Errorf("event %+v, want all of region %d", ev, r.box.Region)
			}
			if err == nil && !bytes.Equal(mem, atkPattern(ev.Imm)) {
				err = fmt.Errorf("event %d: %s", ev.Imm, firstDiff(mem, atkPattern(ev.Imm)))
			}
			if err != nil {
				r.bad.CompareAndSwap(nil, &err)
				continue
			}
			r.events.Add(1)
		}
	}()
	go func() {
		defer wg.Done()
		for msg := range msgs.C {
			if msg.Err != nil {
				continue // a refusal the sender saw too
			}
			mem, err := m.Bytes(msg.Buffer)
			if err == nil && !bytes.Equal(mem, atkPattern(msg.Imm)) {
				err = fmt.Errorf("message %d: %s", msg.Imm, firstDiff(mem, atkPattern(msg.Imm)))
			}
			if err != nil {
				r.bad.CompareAndSwap(nil, &err)
			} else {
				r.verified.Add(1)
			}
			if err := m.PostRecv(posted[msg.Buffer.Region]); err != nil {
				r.bad.CompareAndSwap(nil, &err)
			}
		}
	}()
	t.Cleanup(func() {
		msgs.Close()
		evs.Close()
		wg.Wait()
		if err := n.Close(); err != nil {
			t.Errorf("close the receiving node: %v", err)
		}
	})
	return r
}

// atkPattern is the payload of message seq.
func atkPattern(seq uint32) []byte {
	p := make([]byte, atkMsgSize)
	for i := range p {
		p[i] = byte(seq) + byte(i*13)
	}
	return p
}

// (f) 16 connections of one peer each start a Send of 64 KiB and stall
// after 4 KiB of its payload, for longer than the test runs, and 16 more
// a PutWithImm likewise: a stalled Send holds a receive buffer until the
// frame deadline (30 s), and one peer holds at most 2. Meanwhile another
// peer (the test's manager) sends verified messages and PutWithImms:
// every one must land.
func TestAttackDataStalledSends(t *testing.T) {
	r := newReceiver(t)
	victim := &daemon{name: "receiver", addr: r.n.Addr(), pid: r.n.ManagerPID()}
	qp, err := local.mgr.Client().RequestQueuePair(testCtx(t, 30*time.Second), victim.pid)
	if err != nil {
		t.Fatalf("queue pair to the receiver: %v", err)
	}
	defer qp.Release()
	src, srcMem := localBuffer(t, atkMsgSize)
	// A sender with one message in flight: the next goes once the
	// receiver has taken the last (and posted its buffer again), as an
	// application with flow control does.
	landed := int64(0)
	send := func(seq uint32) error {
		copy(srcMem, atkPattern(seq))
		if err := wait(qp.SendWithImm(src, seq)); err != nil {
			return err
		}
		landed++
		deadline := time.Now().Add(30 * time.Second)
		for r.verified.Load() < landed && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		return nil
	}
	// PutWithImm likewise: the next once the receiver checked the last
	// event.
	notified := int64(0)
	putImm := func(seq uint32) error {
		copy(srcMem, atkPattern(seq))
		if err := wait(qp.PutWithImm(src, r.box, seq)); err != nil {
			return err
		}
		notified++
		deadline := time.Now().Add(30 * time.Second)
		for r.events.Load() < notified && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		return nil
	}
	if err := send(0); err != nil {
		t.Fatalf("legitimate send before the attack: %v", err)
	}
	if err := putImm(0); err != nil {
		t.Fatalf("legitimate PutWithImm before the attack: %v", err)
	}

	// One handshake (one peer) for 32 connections: 16 each stalled
	// mid-send, 16 each stalled mid-PutWithImm into a buffer of the
	// attacker's own.
	own, err := r.n.Manager().Client().RequestBuffer(testCtx(t, 30*time.Second), atkRecvSize, buffer.AccessWrite|buffer.AccessNotify)
	if err != nil {
		t.Fatal(err)
	}
	addr, toks, err := rawRouteAs(testCtx(t, 30*time.Second), victim, 2*atkStalledSends, 0xA77AC4E500000002)
	if err != nil {
		t.Fatalf("attacker's handshake: %v", err)
	}
	var stalled []net.Conn
	defer func() {
		for _, c := range stalled {
			c.Close()
		}
	}()
	for i, tok := range toks {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, c)
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		if err := hello(c, wireVersion, tok); err != nil {
			t.Fatalf("attacker's hello %d: %v", i, err)
		}
		f := sendFrame(atkRecvSize, uint64(i+1))
		if i >= atkStalledSends {
			f = writeImmFrame(atkRecvSize, uint64(i+1), own, uint32(i))
		}
		if _, err := c.Write(append(f, make([]byte, atkMsgSize)...)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the receiver waits for the rest of each

	// Alongside: verified sends and PutWithImms from the other peer, for
	// 3 s.
	var ok, failed int
	var firstErr error
	end := time.Now().Add(3 * time.Second)
	for seq := uint32(1); time.Now().Before(end); seq++ {
		op := send
		if seq%2 == 0 {
			op = putImm
		}
		if err := op(seq); err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		ok++
	}
	t.Logf("FIGURES f stalled-sends: %d sends and %d PutWithImms stalled mid-payload by one peer; another peer's alongside: %d landed (%d messages, %d events, all verified), %d refused",
		atkStalledSends, len(stalled)-atkStalledSends, ok, landed-1, notified-1, failed)
	if failed > 0 || ok == 0 {
		t.Errorf("another peer's sends and PutWithImms with %d stalled: %d landed, %d refused (first: %v)", len(stalled), ok, failed, firstErr)
	}
	if e := r.bad.Load(); e != nil {
		t.Errorf("receiver: %v", *e)
	}
	if got := r.verified.Load(); got != landed {
		t.Errorf("receiver verified %d messages, want %d", got, landed)
	}
	if got := r.events.Load(); got != notified {
		t.Errorf("receiver verified %d events, want %d", got, notified)
	}
}
