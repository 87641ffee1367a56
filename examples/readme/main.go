// Command readme is the README's "Use it from Go" example, compiled by
// every build and run against a daemon by the tests: it writes into a
// buffer at the manager given by -peer, reads it back and checks it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/node"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

func main() {
	peer := flag.String("peer", "127.0.0.1:8090", "the manager's address HOST:PORT")
	secretFile := flag.String("secret-file", "secret", "the deployment's shared secret")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, *peer, *secretFile); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, peerAddr, secretFile string) error {
	secret, err := backend.LoadSecret(secretFile)
	if err != nil {
		return err
	}
	listen, err := actor.ReplyListen(peerAddr) // the local address of the route to the peer, port 0
	if err != nil {
		return err
	}
	// Actor system, protoactor remote (gRPC limits on both sides; across hosts
	// set ServerTLS and ClientTLS), TCP data listener and manager, in one call.
	n, err := node.Start(ctx, node.Config{Listen: listen, Manager: actor.Config{Secret: secret}})
	if err != nil {
		return err
	}
	defer n.Close() // manager, backends, remote and actor system

	me := n.Client()                 // typed client of the local manager
	peer := n.ClientOf(peerAddr, "") // the manager at peerAddr (actor.DefaultName)
	local, err := me.RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	if err != nil {
		return err
	}
	remote, err := peer.RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite) // or a handle another actor sent you
	if err != nil {
		return err
	}
	defer peer.ReleaseBuffer(context.WithoutCancel(ctx), remote)
	qp, err := me.RequestQueuePair(ctx, peer.PID()) // one cached route per peer, shared setup
	if err != nil {
		return err
	}
	defer qp.Release()

	mem, _ := n.Manager().Bytes(local) // fill the local buffer
	copy(mem, "hello, remote memory")
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil { // Put returns once posted; Wait, Poll or Done
		// errors.Is(err, rdmamgr.ErrBadKey / ErrAccess / ErrOutOfRange / ErrReleased / ErrRevoked / ErrExpired /
		//           ErrPeerGone / ErrUnauthenticated / ErrWrongPeer, ...): every sentinel is in package rdmamgr
		// ctx ending first cancels the Put: errors.Is(err, context.DeadlineExceeded) or context.Canceled.
		// Whatever Wait returned, the operation is over: no byte of it touches mem any more.
		return fmt.Errorf("put: %w", err)
	}

	clear(mem)
	half, _ := remote.Slice(0, 512<<10) // sub-handles, overflow-safe
	l2, _ := local.Slice(0, 512<<10)
	var w queuepair.WorkRequest // reusable: no allocation per operation
	qp.PostGet(ctx, &w, l2, half)
	if err := w.Wait(ctx); err != nil { // or w.Cancel(): ends it, waits, returns the outcome
		return fmt.Errorf("get: %w", err)
	}
	b := qp.Submit(ctx, queuepair.PutOp(l2, half), queuepair.GetOp(l2, half)) // ctx's deadline and cancellation
	if err := b.Wait(ctx); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	cq := queuepair.NewCompletionQueue(64) // verbs style: post chains, reap many completions per call
	qp.SetCompletionQueue(cq)
	wrs := []*queuepair.WorkRequest{new(queuepair.WorkRequest), new(queuepair.WorkRequest)} // reusable once reaped
	put := queuepair.PutOp(l2, half)
	put.Unsignaled = true                                                // selective signaling: reported through cq only if it fails
	qp.PostOps(ctx, wrs, []queuepair.Op{put, queuepair.GetOp(l2, half)}) // one doorbell
	reaped := make([]*queuepair.WorkRequest, len(wrs))
	for signaled := false; !signaled; {
		n, err := cq.Wait(ctx, reaped) // cq.Poll never blocks
		if err != nil {
			return fmt.Errorf("completion queue: %w", err)
		}
		for _, w := range reaped[:n] {
			if err := w.Err(); err != nil { // reported means finished, as for Wait
				return fmt.Errorf("chained op: %w", err)
			}
			signaled = signaled || w == wrs[1] // the Get's report vouches for the Put posted before it
		}
	}
	// A chain prepared once (handles checked once) and re-posted as PostOps
	// would post it, whole or any range (Post(ctx, lo, hi)), once reaped.
	chain := qp.PrepareOps(wrs, []queuepair.Op{queuepair.PutOp(l2, half), queuepair.GetOp(l2, half)})
	for range 3 {
		chain.Post(ctx, 0, chain.Len())
		for got := 0; got < chain.Len(); {
			n, err := cq.Wait(ctx, reaped[got:])
			if err != nil {
				return fmt.Errorf("completion queue: %w", err)
			}
			for _, w := range reaped[got : got+n] {
				if err := w.Err(); err != nil {
					return fmt.Errorf("prepared chain: %w", err)
				}
			}
			got += n
		}
	}
	if !bytes.HasPrefix(mem, []byte("hello, remote memory")) {
		return fmt.Errorf("read back %q", mem[:20])
	}
	fmt.Printf("read back %q from %s\n", mem[:20], peerAddr)
	return nil
}
