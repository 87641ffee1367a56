package node_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/node"
)

// Two nodes on loopback, each an actor system with protoactor remote, its
// backends (shm, ibverbs where usable, TCP) and a manager: a buffer at
// each, a queue pair (the route's backend is chosen per peer), a put.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := node.Start(ctx, node.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close() // manager, backends, remote, actor system
	b, err := node.Start(ctx, node.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	peer := a.ClientOf(b.Addr(), "") // b's manager, asked from a
	local, _ := a.Client().RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	remote, _ := peer.RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	qp, err := a.Client().RequestQueuePair(ctx, peer.PID())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer qp.Release()
	mem, _ := a.Manager().Bytes(local)
	copy(mem, "hello, remote memory")
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	theirs, _ := b.Manager().Bytes(remote)
	fmt.Println(string(theirs[:20]))
	// Output: hello, remote memory
}
