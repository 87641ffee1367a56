package actor_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// Two managers assembled by hand over the TCP backend (here in one process
// without protoactor remote; package node assembles the whole stack, remote
// included, in one call), a buffer at each, a queue pair, a put and a get.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys := actor.NewActorSystem(nil)
	defer sys.Shutdown()
	start := func(name string) *actor.Manager {
		m, _ := actor.New(sys, actor.Config{Name: name}) // id and registry; no I/O
		t, _ := tcp.New(tcp.Config{}, m.Registry(), m.Logger())
		_ = t.Start(ctx)    // the data listener
		_ = m.Start(ctx, t) // the actor; the manager owns the backend now
		return m
	}
	a, b := start("a"), start("b")
	defer a.Close()
	defer b.Close()

	me := a.Client()
	peer := actor.NewClient(sys, b.PID())
	local, _ := me.RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	remote, _ := peer.RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	qp, err := me.RequestQueuePair(ctx, peer.PID())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer qp.Release()

	mem, _ := a.Bytes(local)
	copy(mem, "hello, remote memory")
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	theirs, _ := b.Bytes(remote)
	fmt.Println(string(theirs[:20]))

	var w queuepair.WorkRequest // reusable: no allocation per operation
	clear(mem)
	head, _ := local.Slice(0, 5)
	rhead, _ := remote.Slice(0, 5)
	qp.PostGet(ctx, &w, head, rhead)
	if err := w.Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(mem[:5]), bytes.Count(mem, []byte{0}) == len(mem)-5)
	// Output:
	// hello, remote memory
	// hello true
}
