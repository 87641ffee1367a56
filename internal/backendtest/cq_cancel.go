package backendtest

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// testCQCancel is testCancel through a completion queue: victims are
// posted with Submit under a context that is cancelled (or whose deadline
// passes) at a random point of their life, neighbours with PostOps; all
// are reaped from the queue. The moment a victim Get is reaped, its local
// memory is overwritten with a pattern, as a caller reusing it would; a
// later operation on the route orders behind any late byte, and then not
// one byte of the pattern may have changed. Neighbours succeed with the
// right bytes; victims succeed or end with their context's error.
func testCQCancel(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const rounds, perRound = 10, 8
	slot := min(f.MaxSize, 512<<10)
	ha, la := Alloc(t, p.RegA, perRound*slot, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, perRound*slot, buffer.AccessReadWrite)
	probeA, _ := Alloc(t, p.RegA, 64, buffer.AccessReadWrite)
	probeB, _ := Alloc(t, p.RegB, 64, buffer.AccessReadWrite)
	cq := queuepair.NewCompletionQueue(perRound)
	qp := NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), f.Timeout, cq)
	rng := mrand.New(mrand.NewPCG(11, uint64(time.Now().UnixNano())))
	neighbours := newWRs(perRound)
	probe := newWRs(1)
	victims, ended := 0, 0
	for round := range rounds {
		Random(t, la)
		Random(t, lb)
		remoteBefore := bytes.Clone(lb)
		type job struct {
			off, n int
			victim bool
			get    bool
			pat    byte // victim gets: the pattern written at the report
		}
		jobs := map[*queuepair.WorkRequest]*job{}
		var cancels []context.CancelFunc
		for i := range perRound {
			j := &job{off: i * slot, n: 1 + rng.IntN(slot), victim: i%2 == 0}
			op := queuepair.GetOp(Slice(t, ha, j.off, j.n), Slice(t, hb, j.off, j.n))
			j.get = rng.IntN(3) != 0
			if !j.get {
				op = queuepair.PutOp(op.Local, op.Remote)
			}
			if !j.victim {
				qp.PostOps(context.Background(), neighbours[i:i+1], []queuepair.Op{op})
				jobs[neighbours[i]] = j
				continue
			}
			var ctx context.Context
			var cancel context.CancelFunc
			if rng.IntN(2) == 0 {
				ctx, cancel = context.WithCancel(context.Background())
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
			}
			cancels = append(cancels, cancel)
			if j.get {
				j.pat = byte(0x80 | round&0x7f)
				victims++
			}
			jobs[qp.Submit(ctx, op).Requests()[0]] = j
		}
		for _, cancel := range cancels {
			if d := rng.IntN(4); d > 0 {
				time.Sleep(time.Duration(rng.IntN(300*d)) * time.Microsecond)
			}
			cancel()
		}
		seen := Reap(t, cq, perRound, f.Timeout+10*time.Second, func(w *queuepair.WorkRequest) {
			if j := jobs[w]; j != nil && j.pat != 0 {
				for k := range la[j.off : j.off+j.n] {
					la[j.off+k] = j.pat
				}
			}
		})
		for w, err := range seen {
			j := jobs[w]
			switch {
			case j == nil:
				t.Fatalf("round %d: the queue reported a work request nobody posted", round)
			case !j.victim && err != nil:
				t.Fatalf("round %d: neighbour of %d bytes failed: %v", round, j.n, err)
			case j.victim && err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, rdmamgr.ErrDeadline):
				t.Fatalf("round %d: victim ended with %v, want its context's error", round, err)
			case j.victim && err != nil:
				ended++
			case j.victim:
			case j.get:
				AssertSame(t, "neighbour get", la[j.off:j.off+j.n], remoteBefore[j.off:j.off+j.n])
			default:
				AssertSame(t, "neighbour put", lb[j.off:j.off+j.n], la[j.off:j.off+j.n])
			}
		}
		// Orders behind every late byte of the round on TCP.
		qp.PostOps(context.Background(), probe, []queuepair.Op{queuepair.GetOp(probeA, probeB)})
		if err := Reap(t, cq, 1, f.Timeout, nil)[probe[0]]; err != nil {
			t.Fatalf("round %d: op after the victims: %v", round, err)
		}
		stale := 0
		for _, j := range jobs {
			if j.pat != 0 {
				stale += j.n - bytes.Count(la[j.off:j.off+j.n], []byte{j.pat})
			}
		}
		if stale > 0 {
			t.Fatalf("round %d: %d stale bytes landed after their operation was reported through the queue", round, stale)
		}
	}
	if err := p.Route.Err(); err != nil {
		t.Fatalf("route failed: %v", err)
	}
	t.Logf("%d rounds: %d victim gets watched, %d victims ended early, 0 stale bytes", rounds, victims, ended)
}
