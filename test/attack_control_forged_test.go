//go:build linux

package test

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// TestAttackControlForgedSender replays the attacks of issue 10 that passed
// for local by forging the envelope's sender: under --max-remote 2MiB,
// 50 requests for 1 GiB with the daemon's own address as sender;
// queue-pair requests naming an attacker's listener, with a true and with
// a forged sender; status requests whose sender is the attacker's
// listener; a batch addressed to another process; a header claiming local
// origin. Nothing may be granted, and the daemon must never connect to the
// attacker's listener.
func TestAttackControlForgedSender(t *testing.T) {
	d, err := spawnDaemon(t.Name(), "127.0.0.1:0", "--max-remote", "2MiB", "--remote-lease", "30s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(t) })
	run := beginAttack(t, d)
	st0, err := victimStatus(d, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// The attacker's listener counts every connection made to it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialled atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	lure := protoactor.NewPID(ln.Addr().String(), "rdma-manager")

	a := newAttacker(t)
	target := a.target(d)
	ctx := testCtx(t, 2*time.Minute)
	// A true first message binds the attacker's connection to its address.
	if _, err := actor.NewClient(a.sys, target).Ping(ctx); err != nil {
		t.Fatalf("attacker ping: %v", err)
	}

	own := protoactor.NewPID(d.addr, "forged")
	const rounds = 50
	for range rounds {
		a.sys.Root.RequestWithCustomSender(target, &rdmapb.RequestBuffer{Size: 1 << 30, Access: uint32(buffer.AccessReadWrite)}, own)
		a.sys.Root.RequestWithCustomSender(target, &rdmapb.RequestQueuePair{Peer: &rdmapb.ManagerRef{Address: lure.Address, Id: lure.Id}}, own)
		a.sys.Root.RequestWithCustomSender(target, &rdmapb.StatusRequest{}, lure)
		a.sys.Root.RequestWithCustomSender(target, &rdmapb.StatusRequest{}, own)
	}
	// Under its true address: refused with errors to branch on.
	_, err = actor.NewClient(a.sys, target).RequestBuffer(ctx, 1<<30, buffer.AccessReadWrite)
	expectIs(t, "remote request for 1 GiB under --max-remote 2MiB", err, rdmamgr.ErrLimit)
	hdr := a.sys.Root.WithHeaders(map[string]string{"rdmamgr-origin": "local"})
	res, err := hdr.RequestFuture(target, &rdmapb.RequestBuffer{Size: 1 << 30, Access: uint32(buffer.AccessReadWrite)}, 10*time.Second).Result()
	if rb, ok := res.(*rdmapb.RequestBufferResponse); err != nil || !ok || rb.Error.GetCode() != rdmapb.Code_RESOURCE_EXHAUSTED {
		t.Fatalf("request claiming local origin in its header: %v %v, want RESOURCE_EXHAUSTED", res, err)
	}
	for range rounds {
		res, err := a.ask(target, &rdmapb.RequestQueuePair{Peer: &rdmapb.ManagerRef{Address: lure.Address, Id: lure.Id}})
		if qr, ok := res.(*rdmapb.RequestQueuePairResponse); err != nil || !ok || qr.Error.GetCode() != rdmapb.Code_NOT_LOCAL {
			t.Fatalf("remote request_queue_pair: %v %v, want NOT_LOCAL", res, err)
		}
	}
	// A batch for another process: protoactor would relay it to the lure.
	s := remotingStream(t, ctx, d)
	env := &remote.MessageEnvelope{TypeId: 0, MessageData: mustMarshal(&rdmapb.Ping{}), Target: 0}
	for range rounds {
		if err := s.Send(batch([]string{string(proto.MessageName(&rdmapb.Ping{}))}, []*protoactor.PID{lure}, env)); err != nil {
			t.Fatalf("send batch for another process: %v", err)
		}
	}
	// Let the daemon act on everything, then check nothing came of it.
	time.Sleep(2 * time.Second)
	run.end(t)
	run.b.finish() // its control round trips hold a buffer for a moment

	st, err := victimStatus(d, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("the daemon connected to the attacker's listener %d times", n)
	}
	if st.RemoteBytes > st0.RemoteBytes || st.BuffersTotal > st0.BuffersTotal || len(st.Routes) != len(st0.Routes) {
		t.Errorf("granted: remote bytes %d -> %d, buffers %d -> %d, routes %d -> %d",
			st0.RemoteBytes, st.RemoteBytes, st0.BuffersTotal, st.BuffersTotal, len(st0.Routes), len(st.Routes))
	}
	for reason, least := range map[string]uint64{
		actor.RefusedForgedSender:  3 * rounds,
		actor.RefusedForeignTarget: rounds,
		actor.RefusedNotLocal:      rounds,
		actor.RefusedLimit:         2,
	} {
		if got := st.Refusals[reason] - st0.Refusals[reason]; got < least {
			t.Errorf("refusals %q: %d, want at least %d (all: %v)", reason, got, least, st.Refusals)
		}
	}
	t.Logf("refusals: %v", st.Refusals)
}
