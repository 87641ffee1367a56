package node

import (
	"context"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// verbsBench is a sender and a receiver node and what the benchmarks use.
type verbsBench struct {
	send, recv  *Node
	qp          *queuepair.QueuePair
	local, box  buffer.Buffer
	ctr         buffer.Buffer
	events      *actor.Events
	notified    chan struct{}
	receiverPID *protoactor.PID // an actor of the receiver, for the actor-message baseline
}

func newVerbsBench(b *testing.B, kind backend.Kind) *verbsBench {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := &verbsBench{notified: make(chan struct{}, 1)}
	var err error
	for _, n := range []**Node{&v.recv, &v.send} {
		if *n, err = Start(ctx, Config{Backend: kind}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { (*n).Close() })
	}
	must := func(h buffer.Buffer, err error) buffer.Buffer {
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	v.local = must(v.send.Client().RequestBuffer(ctx, 64, buffer.AccessReadWrite))
	v.box = must(v.recv.Client().RequestBuffer(ctx, 64, buffer.AccessWrite|buffer.AccessNotify))
	v.ctr = must(v.recv.Client().RequestBuffer(ctx, 8, buffer.AccessAtomic))
	if v.events, err = v.recv.Manager().SubscribeEvents(16); err != nil {
		b.Fatal(err)
	}
	if v.qp, err = v.send.Client().RequestQueuePair(ctx, v.send.ClientOf(v.recv.Addr(), "").PID()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(v.qp.Release)
	if v.qp.Kind() != kind {
		b.Fatalf("route on %s, want %s", v.qp.Kind(), kind)
	}
	props := protoactor.PropsFromFunc(func(c protoactor.Context) {
		if _, ok := c.Message().(*rdmapb.Ping); ok {
			v.notified <- struct{}{}
		}
	})
	pid, err := v.recv.System().Root.SpawnNamed(props, "notified")
	if err != nil {
		b.Fatal(err)
	}
	v.receiverPID = protoactor.NewPID(pid.Address, pid.Id) // a fresh PID for the sender's system
	return v
}

// BenchmarkNotify: from posting until the receiver knows the bytes landed,
// one at a time, 64 bytes: PutWithImm and its event, against a Put
// followed by an actor message (what a program without notifications
// does). go test -run '^$' -bench Notify ./node
func BenchmarkNotify(b *testing.B) {
	for _, kind := range []backend.Kind{backend.KindSHM, backend.KindTCP} {
		b.Run(string(kind)+"/put-with-imm", func(b *testing.B) {
			v := newVerbsBench(b, kind)
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				w := v.qp.PutWithImm(ctx, v.local, v.box, uint32(i))
				select {
				case <-v.events.C:
				case <-w.Done(): // failed (no event comes) or done before the event was read
					if err := w.Err(); err != nil {
						b.Fatal(err)
					}
					<-v.events.C
					continue
				}
				if err := w.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(string(kind)+"/put-then-actor-message", func(b *testing.B) {
			v := newVerbsBench(b, kind)
			ctx := context.Background()
			root := v.send.System().Root
			b.ResetTimer()
			for range b.N {
				if err := v.qp.Put(ctx, v.local, v.box).Wait(ctx); err != nil {
					b.Fatal(err)
				}
				root.Send(v.receiverPID, &rdmapb.Ping{})
				<-v.notified
			}
		})
	}
}

// BenchmarkFetchAdd: FetchAdds on one word, one at a time and 8 in
// flight. go test -run '^$' -bench FetchAdd ./node
func BenchmarkFetchAdd(b *testing.B) {
	for _, kind := range []backend.Kind{backend.KindSHM, backend.KindTCP} {
		b.Run(string(kind)+"/serial", func(b *testing.B) {
			v := newVerbsBench(b, kind)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if err := v.qp.FetchAdd(ctx, v.ctr, 1).Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(string(kind)+"/8-in-flight", func(b *testing.B) {
			v := newVerbsBench(b, kind)
			ctx := context.Background()
			var ws [8]*queuepair.WorkRequest
			b.ResetTimer()
			for i := range b.N {
				if w := ws[i%8]; w != nil {
					if err := w.Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
				ws[i%8] = v.qp.FetchAdd(ctx, v.ctr, 1)
			}
			for _, w := range ws {
				if w != nil {
					w.Wait(ctx)
				}
			}
		})
	}
}
