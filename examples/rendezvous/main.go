// Command rendezvous shows the verbs beyond Put and Get between two
// managers of one process (run it: go run ./examples/rendezvous):
//
//   - a rendezvous in rv's style: the sender writes each message into the
//     receiver's mailbox with PutWithImm, and the immediate value names the
//     message; the receiver learns of each one from its event stream, only
//     after the bytes are in place;
//   - a distributed counter: goroutines of the sender FetchAdd one word of
//     the receiver while the receiver adds to it with sync/atomic: the sum
//     is exact;
//   - a two-sided message: the receiver posts a buffer, the sender
//     SendWithImm's into it.
//
// -backend picks the data plane (auto: shm between two managers of one
// host; tcp). The tests run it on both.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/node"
)

func main() {
	kind := flag.String("backend", "auto", "data plane: auto, shm or tcp")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, backend.Kind(*kind)); err != nil {
		log.Fatal(err)
	}
}

const (
	messages = 16
	slot     = 64 // bytes per mailbox slot
	adders   = 4
	adds     = 1000
)

func run(ctx context.Context, kind backend.Kind) error {
	recv, err := node.Start(ctx, node.Config{Backend: kind})
	if err != nil {
		return err
	}
	defer recv.Close()
	send, err := node.Start(ctx, node.Config{Backend: kind})
	if err != nil {
		return err
	}
	defer send.Close()

	// The receiver: a mailbox peers may write and notify, a counter they
	// may run atomics on, and its event stream.
	box, err := recv.Client().RequestBuffer(ctx, messages*slot, buffer.AccessWrite|buffer.AccessNotify)
	if err != nil {
		return err
	}
	ctr, err := recv.Client().RequestBuffer(ctx, 8, buffer.AccessAtomic)
	if err != nil {
		return err
	}
	events, err := recv.Manager().SubscribeEvents(messages)
	if err != nil {
		return err
	}
	defer events.Close()

	// The sender: a queue pair to the receiver (the handles above travel
	// as plain values, or inside any actor message).
	qp, err := send.Client().RequestQueuePair(ctx, send.ClientOf(recv.Addr(), "").PID())
	if err != nil {
		return err
	}
	defer qp.Release()
	fmt.Printf("route: %s\n", qp.Kind())
	if err := rendezvous(ctx, send, recv, qp, box, events); err != nil {
		return err
	}
	if err := counter(ctx, recv, qp, ctr); err != nil {
		return err
	}
	return message(ctx, send, recv, qp)
}
