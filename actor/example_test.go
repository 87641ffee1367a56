package actor_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/node"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// Two managers (package node assembles each: actor system, remote, TCP
// data plane and manager), a buffer at each, a queue pair, a put and a get.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := func(name string) *node.Node {
		n, err := node.Start(ctx, node.Config{Backend: backend.KindTCP, Manager: actor.Config{Name: name}})
		if err != nil {
			panic(err)
		}
		return n
	}
	na, nb := start("a"), start("b")
	defer na.Close()
	defer nb.Close()
	a, b := na.Manager(), nb.Manager()

	me := a.Client()
	peer := na.ClientOf(nb.Addr(), "b")
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
