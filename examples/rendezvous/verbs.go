package main

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/node"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// rendezvous sends each message with PutWithImm (imm = its number) and
// has the receiver read it when its event comes.
func rendezvous(ctx context.Context, send, recv *node.Node, qp *queuepair.QueuePair, box buffer.Buffer, events *actor.Events) error {
	local, err := send.Client().RequestBuffer(ctx, messages*slot, buffer.AccessReadWrite)
	if err != nil {
		return err
	}
	out, _ := send.Manager().Bytes(local)
	for i := range messages {
		msg := out[i*slot : (i+1)*slot]
		copy(msg, fmt.Sprintf("message %02d", i))
		src, _ := local.Slice(uint64(i*slot), slot)
		dst, _ := box.Slice(uint64(i*slot), slot)
		if err := qp.PutWithImm(ctx, src, dst, uint32(i)).Wait(ctx); err != nil {
			return fmt.Errorf("put with imm %d: %w", i, err)
		}
	}
	in, _ := recv.Manager().Bytes(box)
	for i := range messages {
		select {
		case ev := <-events.C:
			got := in[ev.Offset : ev.Offset+ev.Length]
			if int(ev.Imm) != i || !bytes.HasPrefix(got, []byte(fmt.Sprintf("message %02d", ev.Imm))) {
				return fmt.Errorf("event %d: imm %d, bytes %q", i, ev.Imm, got[:10])
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fmt.Printf("rendezvous: %d messages, each seen after its bytes, in order\n", messages)
	return nil
}

// counter has adders FetchAdd one word of the receiver while the receiver
// adds with sync/atomic.
func counter(ctx context.Context, recv *node.Node, qp *queuepair.QueuePair, ctr buffer.Buffer) error {
	mem, _ := recv.Manager().Bytes(ctr)
	word := (*uint64)(unsafe.Pointer(&mem[0])) // 8-byte aligned: buffers start aligned
	var wg sync.WaitGroup
	errs := make(chan error, adders)
	for range adders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range adds {
				if err := qp.FetchAdd(ctx, ctr, 1).Wait(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range adds {
		atomic.AddUint64(word, 1)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("fetch-add: %w", err)
	}
	got, want := atomic.LoadUint64(word), uint64((adders+1)*adds)
	if got != want {
		return fmt.Errorf("counter %d, want %d", got, want)
	}
	fmt.Printf("counter: %d (%d peers' FetchAdds and the owner's sync/atomic)\n", got, adders*adds)
	return nil
}

// message posts a receive buffer and sends into it.
func message(ctx context.Context, send, recv *node.Node, qp *queuepair.QueuePair) error {
	msgs, err := recv.Manager().SubscribeMessages(4)
	if err != nil {
		return err
	}
	defer msgs.Close()
	rb, err := recv.Client().RequestBuffer(ctx, 256, buffer.AccessRead)
	if err != nil {
		return err
	}
	if err := recv.Manager().PostRecv(rb); err != nil {
		return err
	}
	local, err := send.Client().RequestBuffer(ctx, 11, buffer.AccessRead)
	if err != nil {
		return err
	}
	out, _ := send.Manager().Bytes(local)
	copy(out, "hello, recv")
	if err := qp.SendWithImm(ctx, local, 7).Wait(ctx); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	m := <-msgs.C
	got, _ := recv.Manager().Bytes(m.Buffer)
	if m.Err != nil || m.Imm != 7 || !m.HasImm || string(got) != "hello, recv" {
		return fmt.Errorf("message %+v: %q", m, got)
	}
	fmt.Printf("message: %q with imm %d\n", got, m.Imm)
	return nil
}
