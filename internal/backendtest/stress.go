package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// StressEnv is what CancelStress needs: two or more queue pairs to one peer
// (over one route or several), a buffer of the peer whose content is known,
// and a local buffer with its memory.
type StressEnv struct {
	QPs        []*queuepair.QueuePair
	Remote     buffer.Buffer // the peer's, read-write, StressRemoteSize(MaxSize)
	RemoteData []byte        // Remote's content: its first 2×MaxSize bytes are checked by gets
	Local      buffer.Buffer // ours, read-write, at least StressLocalSize(MaxSize)
	LocalMem   []byte        // Local's memory
	MaxSize    int           // largest operation
	Victims    int           // operations to end early (deadline or cancel), at least
	Duration   time.Duration // and no longer than this (bound)
	Timeout    time.Duration // bound of one wait (hang guard)
	Seed       uint64
	// CQ, when set, is a completion queue every queue pair of QPs reports
	// into: victims then take their outcome from it (stress_cq.go).
	CQ *queuepair.CompletionQueue
}

// StressReport counts what CancelStress saw.
type StressReport struct {
	Rounds, Tries        int // rounds; victim operations posted
	Ended                int // victims that ended with their ctx's error
	Succeeded            int // victims that completed before the cancel took effect
	Neighbours           int // operations beside them, all of which must succeed
	StaleBytes           int // bytes that landed in a victim's memory after its report (must be 0)
	WrongCompletions     int // outcomes that contradict the contract (must be 0)
	ByKind               [victimKinds]int
	FirstWrong, Duration string
}

func (r StressReport) String() string {
	return fmt.Sprintf("%d rounds, %d victims (%d ended by ctx: %d before posting, %d tiny deadline, %d cancelled mid-flight, %d wait deadline; %d completed first), %d neighbours, stale bytes %d, wrong completions %d, in %s",
		r.Rounds, r.Tries, r.Ended, r.ByKind[kindPreCancelled], r.ByKind[kindTinyDeadline], r.ByKind[kindCancelLater], r.ByKind[kindWaitDeadline],
		r.Succeeded, r.Neighbours, r.StaleBytes, r.WrongCompletions, r.Duration)
}

// StressRemoteSize is the peer's buffer CancelStress needs: gets read the
// first two thirds; victim puts, whose target is undefined once they end
// early, write only the last third.
func StressRemoteSize(maxSize int) int { return 3 * maxSize }

// StressLocalSize is the local buffer CancelStress needs for operations of
// up to maxSize bytes.
func StressLocalSize(maxSize int) int { return (2*stressVictims + 2) * maxSize }

const stressVictims = 10 // victims per round

// Victim kinds: where in its life an operation is ended.
const (
	kindPreCancelled = iota // ctx cancelled before Submit: never posted
	kindTinyDeadline        // a deadline of 0–200 µs: queued, on the wire or just answered
	kindCancelLater         // cancel() from another goroutine after 0–600 µs: mid-payload often
	kindWaitDeadline        // PostGet/PostPut, then Wait with a short deadline
	victimKinds
)

// CancelStress ends operations at random points of their life (before the
// request is sent, mid-payload, after the payload and before the
// completion), reuses each victim's memory the moment its outcome is
// reported with a fresh pattern, and watches that memory for a round more;
// neighbours on every queue pair must all succeed with the right bytes.
// It fails the test on any stale byte or wrong completion.
func CancelStress(t *testing.T, e StressEnv) StressReport {
	t.Helper()
	rng := mrand.New(mrand.NewPCG(e.Seed, 0x5eed))
	var rep StressReport
	start := time.Now()
	var prev []victim // the last round's victims, watched one round more
	var rp *reaper
	if e.CQ != nil {
		rp = startReaper(e.CQ)
		defer rp.close()
	}
	for round := 0; rep.Ended < e.Victims && time.Since(start) < e.Duration; round++ {
		area := (round % 2) * stressVictims * e.MaxSize
		vs := make([]victim, stressVictims)
		for i := range vs {
			vs[i] = newVictim(rng, e, area+i*e.MaxSize, byte(0x80|round&0x7f))
		}
		var wg sync.WaitGroup
		for i := range vs {
			wg.Go(func() { vs[i].run(e, rp) })
		}
		for i, qp := range e.QPs[:min(len(e.QPs), 4)] {
			wg.Go(func() { rep.neighbour(t, e, qp, i, rng2(e.Seed, round, i)) })
		}
		wg.Wait()
		rep.Neighbours += 2 * min(len(e.QPs), 4)
		for i := range vs {
			rep.account(&vs[i])
		}
		rep.StaleBytes += watch(e, prev)
		if rp != nil {
			if twice := rp.forget(); twice != "" {
				rep.WrongCompletions++
				rep.FirstWrong = twice
			}
		}
		prev = vs
		rep.Rounds++
		if rep.StaleBytes > 0 || rep.WrongCompletions > 0 {
			break
		}
	}
	time.Sleep(50 * time.Millisecond) // a late byte of the last round has had time to land
	rep.StaleBytes += watch(e, prev)
	rep.Duration = time.Since(start).Round(time.Millisecond).String()
	if rep.StaleBytes > 0 || rep.WrongCompletions > 0 {
		t.Errorf("cancel stress: %s; first wrong completion: %s", rep, rep.FirstWrong)
	}
	return rep
}

func rng2(seed uint64, round, i int) *mrand.Rand {
	return mrand.New(mrand.NewPCG(seed^uint64(round)<<20, uint64(i)))
}

// victim is one operation to be ended early.
type victim struct {
	kind    int
	op      backend.Op
	off, n  int // local offset and length
	roff    int // remote offset
	delay   time.Duration
	pattern byte
	err     error // the reported outcome
	wrong   string
}

func newVictim(rng *mrand.Rand, e StressEnv, off int, pattern byte) victim {
	v := victim{kind: rng.IntN(victimKinds), op: backend.OpRead, off: off, pattern: pattern}
	if rng.IntN(4) == 0 {
		v.op = backend.OpWrite
	}
	v.n = 1 + rng.IntN(e.MaxSize)
	if rng.IntN(2) == 0 {
		v.n = e.MaxSize/2 + rng.IntN(e.MaxSize/2) // large: mid-payload is likely
	}
	v.roff = rng.IntN(e.MaxSize)
	if v.op == backend.OpWrite {
		v.roff = 2*e.MaxSize + rng.IntN(e.MaxSize-v.n+1)
	}
	switch v.kind {
	case kindTinyDeadline:
		v.delay = time.Duration(rng.IntN(200)) * time.Microsecond
	case kindCancelLater:
		v.delay = time.Duration(rng.IntN(600)) * time.Microsecond
	case kindWaitDeadline:
		v.delay = time.Duration(rng.IntN(400)) * time.Microsecond
	}
	return v
}

// run posts the victim, ends it, and at the moment its outcome is reported
// (by rp's completion queue when rp is not nil) takes the memory back: a
// get that succeeded must hold the remote bytes; then the memory gets the
// victim's pattern.
func (v *victim) run(e StressEnv, rp *reaper) {
	qp := e.QPs[v.off/e.MaxSize%len(e.QPs)]
	local, _ := e.Local.Slice(uint64(v.off), uint64(v.n))
	remote, _ := e.Remote.Slice(uint64(v.roff), uint64(v.n))
	mem := e.LocalMem[v.off : v.off+v.n]
	if v.op == backend.OpRead {
		for i := range mem {
			mem[i] = ^e.RemoteData[v.roff+i] // so a partial get is visible
		}
	}
	op := queuepair.GetOp(local, remote)
	if v.op == backend.OpWrite {
		op = queuepair.PutOp(local, remote)
	}
	var err error
	if rp != nil {
		err = v.runCQ(e, rp, qp, op)
	} else {
		err = v.runWait(e, qp, op)
	}
	v.err = err
	if err == nil && v.op == backend.OpRead && !bytes.Equal(mem, e.RemoteData[v.roff:v.roff+v.n]) {
		v.wrong = fmt.Sprintf("get of %d bytes succeeded with wrong bytes", v.n)
	}
	for i := range mem {
		mem[i] = v.pattern
	}
}

// runWait ends the victim and takes its outcome from Wait.
func (v *victim) runWait(e StressEnv, qp *queuepair.QueuePair, op queuepair.Op) error {
	local, remote := op.Local, op.Remote
	var err error
	switch v.kind {
	case kindPreCancelled:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err = qp.Submit(ctx, op).Wait(context.Background())
	case kindTinyDeadline:
		ctx, cancel := context.WithTimeout(context.Background(), v.delay)
		err = qp.Submit(ctx, op).Wait(ctx)
		cancel()
	case kindCancelLater:
		ctx, cancel := context.WithCancel(context.Background())
		b := qp.Submit(ctx, op)
		time.AfterFunc(v.delay, cancel)
		hang, stop := context.WithTimeout(context.Background(), e.Timeout)
		err = b.Wait(hang) // ended by Submit's ctx, not by this one
		stop()
		cancel()
	case kindWaitDeadline:
		var w queuepair.WorkRequest
		if v.op == backend.OpWrite {
			qp.PostPut(context.Background(), &w, local, remote)
		} else {
			qp.PostGet(context.Background(), &w, local, remote)
		}
		ctx, cancel := context.WithTimeout(context.Background(), v.delay)
		err = w.Wait(ctx)
		cancel()
		if done, perr := w.Poll(); !done || perr != err {
			v.wrong = fmt.Sprintf("Wait returned %v, Poll then says %v %v", err, done, perr)
		}
	}
	return err
}

// account adds a finished victim to the report.
func (r *StressReport) account(v *victim) {
	r.Tries++
	switch {
	case v.wrong != "":
	case v.err == nil:
		if v.kind == kindPreCancelled {
			v.wrong = "an operation whose ctx was cancelled before Submit succeeded"
		}
		r.Succeeded++
	case errors.Is(v.err, context.Canceled) && (v.kind == kindPreCancelled || v.kind == kindCancelLater),
		errors.Is(v.err, context.DeadlineExceeded) && errors.Is(v.err, rdmamgr.ErrDeadline) &&
			(v.kind == kindTinyDeadline || v.kind == kindWaitDeadline):
		r.Ended++
		r.ByKind[v.kind]++
	default:
		v.wrong = fmt.Sprintf("kind %d ended with %v", v.kind, v.err)
	}
	if v.wrong != "" {
		r.WrongCompletions++
		if r.FirstWrong == "" {
			r.FirstWrong = v.wrong
		}
	}
}

// neighbour runs a get and a put on qp with a generous deadline beside the
// victims: both must succeed with the right bytes.
func (r *StressReport) neighbour(t *testing.T, e StressEnv, qp *queuepair.QueuePair, i int, rng *mrand.Rand) {
	n := 1 + rng.IntN(max(e.MaxSize/2, 1))
	slot := 2*stressVictims*e.MaxSize + i*e.MaxSize/2
	roff := rng.IntN(e.MaxSize)
	local, _ := e.Local.Slice(uint64(slot), uint64(n))
	remote, _ := e.Remote.Slice(uint64(roff), uint64(n))
	ctx, cancel := context.WithTimeout(context.Background(), e.Timeout)
	defer cancel()
	mem := e.LocalMem[slot : slot+n]
	if err := qp.Get(ctx, local, remote).Wait(ctx); err != nil {
		t.Errorf("neighbour get of %d bytes on queue pair %d: %v", n, qp.ID(), err)
		return
	}
	if !bytes.Equal(mem, e.RemoteData[roff:roff+n]) {
		t.Errorf("neighbour get of %d bytes on queue pair %d: wrong bytes", n, qp.ID())
	}
	// A put of the same bytes back leaves the remote content as it was.
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		t.Errorf("neighbour put of %d bytes on queue pair %d: %v", n, qp.ID(), err)
	}
}

// watch counts bytes of vs's memory that are no longer their pattern.
func watch(e StressEnv, vs []victim) int {
	stale := 0
	for _, v := range vs {
		mem := e.LocalMem[v.off : v.off+v.n]
		stale += len(mem) - bytes.Count(mem, []byte{v.pattern})
	}
	return stale
}
