package tcp

import (
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// BenchmarkFetchAdd keeps 64 FetchAdd of one word in flight over a
// loopback route: ns/op is the inverse of the operations per second.
func BenchmarkFetchAdd(b *testing.B) {
	const depth = 64
	p := newPair(b, Config{}, Config{})
	hr, _ := backendtest.Alloc(b, p.regB, 64, buffer.AccessReadWrite|buffer.AccessAtomic)
	word := backendtest.Slice(b, hr, 8, 8)
	done := make(chanCompleter, depth)
	post := func(wr *backend.WorkRequest) {
		wr.Deadline = time.Now().Add(time.Minute)
		if err := p.route.Post(wr); err != nil {
			b.Fatalf("post: %v", err)
		}
	}
	b.ReportAllocs()
	posted := 0
	for range min(depth, b.N) {
		post(&backend.WorkRequest{Op: backend.OpFetchAdd, Remote: word, Swap: 1, Done: done})
		posted++
	}
	for completed := 0; completed < b.N; completed++ {
		res := <-done
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		if posted < b.N {
			post(res.WR)
			posted++
		}
	}
}

// BenchmarkPutWithImmToEvent posts 64-byte PutWithImm one at a time:
// ns-to-event/op is the latency from the post to the event at the owner's
// inbox, ns/op the whole round trip (the completion comes after the
// event). BenchmarkPutOneAtATime is a plain Put's round trip.
func BenchmarkPutWithImmToEvent(b *testing.B) { benchOneAtATime(b, backend.OpWriteImm) }

func BenchmarkPutOneAtATime(b *testing.B) { benchOneAtATime(b, backend.OpWrite) }

func benchOneAtATime(b *testing.B, op backend.Op) {
	p := newPair(b, Config{}, Config{})
	in := backendtest.NewInbox(p.regB, 1, 1)
	p.b.SetInbox(in)
	b.Cleanup(in.Close)
	_, local := backendtest.Alloc(b, p.regA, 64, buffer.AccessReadWrite)
	hr, _ := backendtest.Alloc(b, p.regB, 64, buffer.AccessReadWrite|buffer.AccessNotify)
	done := make(chanCompleter, 1)
	wr := &backend.WorkRequest{Op: op, Local: local, Remote: hr, Imm: 1, Done: done}
	b.ReportAllocs()
	var toEvent time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		wr.Deadline = start.Add(time.Minute)
		if err := p.route.Post(wr); err != nil {
			b.Fatal(err)
		}
		if op == backend.OpWriteImm {
			<-in.Events() // the owner's subscriber has it
			toEvent += time.Since(start)
			n++
		}
		if res := <-done; res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	if n > 0 {
		b.ReportMetric(float64(toEvent.Nanoseconds())/float64(n), "ns-to-event/op")
	}
}

// BenchmarkGetOneAtATime is a 64-byte Get's round trip, one at a time:
// with GOMAXPROCS=1 on one CPU, every step of both ends runs in turn, so
// ns/op is their whole cost; BenchmarkWriteOneBuffer/write is a plain
// ping-pong's.
func BenchmarkGetOneAtATime(b *testing.B) { benchOneAtATime(b, backend.OpRead) }
