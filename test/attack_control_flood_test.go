//go:build linux

package test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// TestAttackControlBufferFlood requests buffers from a daemon with its
// default caps until it refuses, as the attacker of issue 10 did (it
// registered 128 TiB of address space until the process died): 1 GiB at a
// time, then one 64 TiB request, then 4 KiB at a time. The daemon must
// refuse with rdmamgr.ErrLimit before any cap is passed, keep serving
// the legitimate client, and reap what it granted when the lease (3 s
// here) runs out.
func TestAttackControlBufferFlood(t *testing.T) {
	d, err := spawnDaemon(t.Name(), "127.0.0.1:0", "--remote-lease", "3s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(t) })
	run := beginAttack(t, d)
	st0, err := victimStatus(d, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st0.MaxRemoteBytes == 0 || st0.MaxRegisteredBytes == 0 || st0.MaxRemoteBytes > st0.MaxRegisteredBytes {
		t.Fatalf("default caps: remote %d, registered %d", st0.MaxRemoteBytes, st0.MaxRegisteredBytes)
	}

	a := newAttacker(t)
	c := actor.NewClient(a.sys, a.target(d))
	ctx := testCtx(t, 2*time.Minute)
	end := time.Now().Add(time.Minute)
	grant := func(size uint64, most int) (granted int, err error) {
		for range most {
			if time.Now().After(end) {
				return granted, errors.New("out of time")
			}
			if _, err := c.RequestBuffer(ctx, size, buffer.AccessReadWrite); err != nil {
				return granted, err
			}
			granted++
		}
		return granted, fmt.Errorf("%d requests of %d bytes all granted", most, size)
	}
	floodStart := time.Now()
	big, err := grant(1<<30, 1<<10)
	expectIs(t, "1 GiB requests", err, rdmamgr.ErrLimit)
	_, err = c.RequestBuffer(ctx, 1<<46, buffer.AccessReadWrite)
	expectIs(t, "a 64 TiB request", err, rdmamgr.ErrLimit)
	small, err := grant(4096, 4<<10)
	expectIs(t, "4 KiB requests", err, rdmamgr.ErrLimit)
	flood := time.Since(floodStart)

	st, err := victimStatus(d, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("granted %d × 1 GiB and %d × 4 KiB; remote %d of %d bytes, %d of %d registered, %d buffers",
		big, small, st.RemoteBytes, st.MaxRemoteBytes, st.RegisteredBytes, st.MaxRegisteredBytes, st.BuffersTotal)
	if st.RemoteBytes > st.MaxRemoteBytes || st.RegisteredBytes > st.MaxRegisteredBytes {
		t.Errorf("past the caps: remote %d of %d, registered %d of %d", st.RemoteBytes, st.MaxRemoteBytes, st.RegisteredBytes, st.MaxRegisteredBytes)
	}
	// Every grant counts against the caps while held; on a machine slow
	// enough that the flood outlasts the 3 s lease, the lease reaps some
	// meanwhile and frees room for more: then what is held is checked.
	// The status counts every buffer, and the legitimate client's control
	// round trip holds one 4 KiB buffer of its own for a moment.
	perPeer := actor.DefaultConfig().MaxRemoteBuffersPerPeer
	const legitHeld = 1
	switch {
	case flood < 3*time.Second && (uint64(big) > st.MaxRemoteBytes>>30 || big+small > perPeer):
		t.Errorf("granted %d big and %d small buffers to one peer", big, small)
	case int(st.BuffersTotal-st0.BuffersTotal) > perPeer+legitHeld:
		t.Errorf("%d buffers held after a flood of %v, cap %d for the attacker and %d for the legitimate client",
			st.BuffersTotal-st0.BuffersTotal, flood, perPeer, legitHeld)
	}
	// The lease reaps them all.
	deadline := time.Now().Add(30 * time.Second)
	for st.BuffersTotal > st0.BuffersTotal || st.RemoteBytes > st0.RemoteBytes {
		if time.Now().After(deadline) {
			t.Fatalf("leased buffers not reaped: %d buffers (were %d), %d remote bytes (were %d)",
				st.BuffersTotal, st0.BuffersTotal, st.RemoteBytes, st0.RemoteBytes)
		}
		time.Sleep(250 * time.Millisecond)
		if st, err = victimStatus(d, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	run.end(t)
}

// TestAttackControlLogFlood sends a daemon a flood of requests it refuses
// (route handshakes past the per-peer rate, forged senders, unknown
// message types, queue-pair requests from a peer) and checks that every
// refusal is counted in status while the log stays short.
func TestAttackControlLogFlood(t *testing.T) {
	d, err := spawnDaemon(t.Name(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(t) })
	run := beginAttack(t, d)
	st0, err := victimStatus(d, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	logBefore := len(d.stderr.String())

	a := newAttacker(t)
	target := a.target(d)
	if _, err := actor.NewClient(a.sys, target).Ping(testCtx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	own := protoactor.NewPID(d.addr, "forged")
	const rounds = 5000
	end := time.Now().Add(20 * time.Second)
	sent := 0
	for i := 0; i < rounds && time.Now().Before(end); i++ {
		hs := &rdmapb.RouteHandshake{Version: actor.ProtocolVersion, InitiatorId: uint64(i) | 1, InitiatorAddr: a.addr,
			Backend: string(backend.KindTCP), Endpoint: []byte{1, 0, 1, 0}, Nonce: make([]byte, backend.NonceSize), Mac: []byte("bad")}
		a.sys.Root.Request(target, hs)
		a.sys.Root.RequestWithCustomSender(target, &rdmapb.Ping{}, own)
		a.sys.Root.Request(target, &rdmapb.Pong{}) // a type the manager does not take
		a.sys.Root.Request(target, &rdmapb.RequestQueuePair{Peer: &rdmapb.ManagerRef{Address: a.addr, Id: "x"}})
		sent++
		if i%500 == 499 {
			time.Sleep(10 * time.Millisecond) // let the mailbox drain a little
		}
	}
	// Every refusal is counted once the daemon has read them all.
	want := map[string]uint64{
		actor.RefusedHandshake:    uint64(sent - actor.DefaultConfig().HandshakesPerPeer),
		actor.RefusedForgedSender: uint64(sent),
		actor.RefusedUnknownType:  uint64(sent),
		actor.RefusedNotLocal:     uint64(sent),
	}
	var st *rdmapb.StatusResponse
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err = victimStatus(d, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		short := ""
		for reason, n := range want {
			if got := st.Refusals[reason] - st0.Refusals[reason]; got < n {
				short += fmt.Sprintf(" %s %d of %d", reason, got, n)
			}
		}
		if short == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals not all counted:%s (all: %v)", short, st.Refusals)
		}
		time.Sleep(250 * time.Millisecond)
	}
	run.end(t)

	logged := d.stderr.String()[logBefore:]
	lines := strings.Count(logged, "\n")
	t.Logf("%d × 4 refused requests: %d log lines (%d bytes); refusals %v", sent, lines, len(logged), st.Refusals)
	// 5 lines per reason per 10 s, for a few reasons, over the test's
	// seconds: far below one line per request.
	if lines > 200 || len(logged) > 64<<10 {
		t.Errorf("%d log lines (%d bytes) for %d refused requests:\n%.4000s", lines, len(logged), 4*sent, logged)
	}
	if len(st.Routes) != len(st0.Routes) {
		t.Errorf("routes %d -> %d", len(st0.Routes), len(st.Routes))
	}
}
