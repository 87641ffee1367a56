//go:build linux

package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/remoteguard"
)

// The control-plane attack tests (attack_control_*_test.go) each run one
// bounded attack against a real `rdmamgr serve` process while a legitimate
// client moves verified bytes and makes control requests alongside. A
// watchdog samples the victim's RSS, fds and threads from /proc and its
// goroutines from status; it kills the victim if its RSS passes
// attackRSSBound, which fails the test. Afterwards the victim's figures
// must come back near the baseline taken before the attack.

const (
	// attackRSSBound: the watchdog kills a victim whose RSS passes this.
	attackRSSBound = 2 << 30
	// attackSettle bounds the wait for figures to come back after an
	// attack.
	attackSettle = 60 * time.Second
	// Slack over the baseline once an attack ended.
	attackRSSSlack        = 96 << 20
	attackFDSlack         = 6 + 16 // 16: the spare memfds memreg keeps per process (owned.go), filled by a flood of freed buffers
	attackGoroutinesSlack = 24
)

// legitBench is the legitimate client kept running during an attack: a
// verified put and get of 64 KiB through a queue pair to the victim, and
// every 8 rounds a control round trip (request and release a buffer).
type legitBench struct {
	ops, bytes, ctl atomic.Uint64
	errs            atomic.Uint64
	firstErr        atomic.Pointer[error]

	start time.Time
	stop  chan struct{}
	done  chan struct{}
}

const (
	legitOpSize    = 64 << 10
	legitMaxRounds = 1 << 20 // bound on the loop, besides the time
	legitMaxTime   = 5 * time.Minute
)

// startLegitBench starts the legitimate client against d; it stops when
// the test ends, if not before.
func startLegitBench(t *testing.T, d *daemon) *legitBench {
	t.Helper()
	qp := queuePair(t, d)
	// Its own lease: a test may give remote buffers a short default one.
	rb, err := d.client().RequestBuffer(testCtx(t, 30*time.Second), 1<<20, buffer.AccessReadWrite, actor.WithLease(time.Hour))
	if err != nil {
		t.Fatalf("%s: legit buffer: %v", d.name, err)
	}
	src, srcMem := localBuffer(t, legitOpSize)
	dst, dstMem := localBuffer(t, legitOpSize)
	r := newRand(t)
	b := &legitBench{start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		end := time.Now().Add(legitMaxTime)
		for i := 0; i < legitMaxRounds && time.Now().Before(end); i++ {
			select {
			case <-b.stop:
				return
			default:
			}
			off := uint64(r.IntN(16)) * legitOpSize
			fill(r, srcMem)
			err := wait(qp.Put(context.Background(), src, slice(rb, off, legitOpSize)))
			if err == nil {
				clear(dstMem)
				err = wait(qp.Get(context.Background(), dst, slice(rb, off, legitOpSize)))
			}
			if err == nil && !bytes.Equal(srcMem, dstMem) {
				err = fmt.Errorf("get after put: %s", firstDiff(srcMem, dstMem))
			}
			if err == nil && i%8 == 0 {
				err = b.control(d)
			}
			if err != nil {
				b.fail(err)
				continue
			}
			b.ops.Add(2)
			b.bytes.Add(2 * legitOpSize)
		}
	}()
	t.Cleanup(func() { b.finish() })
	return b
}

func (b *legitBench) control(d *daemon) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := d.client()
	buf, err := c.RequestBuffer(ctx, 4096, buffer.AccessRead)
	if err != nil {
		return fmt.Errorf("legit request_buffer: %w", err)
	}
	if err := c.ReleaseBuffer(ctx, buf); err != nil {
		return fmt.Errorf("legit release_buffer: %w", err)
	}
	b.ctl.Add(1)
	return nil
}

func (b *legitBench) fail(err error) {
	b.errs.Add(1)
	b.firstErr.CompareAndSwap(nil, &err)
}

// finish stops the bench and waits for its loop.
func (b *legitBench) finish() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
}

// window returns the bench's counts since the last call, as a figure.
type benchFigures struct {
	ops, ctl, errs uint64
	mbps           float64
	d              time.Duration
}

func (f benchFigures) String() string {
	return fmt.Sprintf("%d verified ops (%.1f MB/s), %d control round trips, %d errors in %v", f.ops, f.mbps, f.ctl, f.errs, f.d.Round(time.Millisecond))
}

// mark returns a function that reports the bench's figures since mark.
func (b *legitBench) mark() func() benchFigures {
	ops, by, ctl, errs, t0 := b.ops.Load(), b.bytes.Load(), b.ctl.Load(), b.errs.Load(), time.Now()
	return func() benchFigures {
		d := time.Since(t0)
		return benchFigures{ops: b.ops.Load() - ops, ctl: b.ctl.Load() - ctl, errs: b.errs.Load() - errs,
			mbps: float64(b.bytes.Load()-by) / d.Seconds() / 1e6, d: d}
	}
}

// check fails the test if the bench saw an error or made no progress.
func (f benchFigures) check(t *testing.T, b *legitBench, phase string) {
	t.Helper()
	if f.errs > 0 {
		t.Errorf("legitimate client during %s: %d errors, first: %v", phase, f.errs, *b.firstErr.Load())
	}
	if f.ops == 0 || f.ctl == 0 {
		t.Errorf("legitimate client during %s: no progress (%v)", phase, f)
	}
}

// attacker is a separate actor system with its own protoactor remote in
// the test process: a hostile peer that speaks protoactor. It must address
// the victim through its own PID values (target): a PID caches the process
// that first sent to it, so sending to daemon.pid would go out through the
// test's node.
type attacker struct {
	sys  *protoactor.ActorSystem
	r    *remoteguard.Remote
	addr string
}

// theAttacker is the test process's one attacker, which TestMain starts
// right after the test's node, before any test talks, and the attack tests
// share (each attacks a victim of its own).
var theAttacker *attacker

func startAttacker() (*attacker, error) {
	sys := actor.NewActorSystem(nil)
	r, addr, err := remoteguard.Start(sys, "127.0.0.1:0", remoteguard.Config{})
	if err != nil {
		sys.Shutdown()
		return nil, err
	}
	return &attacker{sys: sys, r: r, addr: addr}, nil
}

// close stops the attacker's remote, waiting for its connections, and its
// actor system.
func (a *attacker) close() {
	remoteguard.Stop(a.sys, a.r)
	a.sys.Shutdown()
}

// newAttacker returns the test process's attacker.
func newAttacker(t *testing.T) *attacker {
	t.Helper()
	if theAttacker == nil {
		t.Fatal("no attacker: TestMain starts it")
	}
	return theAttacker
}

// target returns a PID of d's manager for the attacker's own use.
func (a *attacker) target(d *daemon) *protoactor.PID { return protoactor.NewPID(d.addr, d.pid.Id) }

// ask sends msg to pid from the attacker and waits for the reply.
func (a *attacker) ask(pid *protoactor.PID, msg any) (any, error) {
	return a.sys.Root.RequestFuture(pid, msg, 10*time.Second).Result()
}

// refusalsOf returns the victim's refusal count for reason.
func refusalCount(t *testing.T, d *daemon, reason string) uint64 {
	t.Helper()
	st, err := victimStatus(d, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: status: %v", d.name, err)
	}
	return st.Refusals[reason]
}

// expectIs fails the test unless errors.Is(err, want).
func expectIs(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

// attackRun frames one attack: the victim's watchdog, the legitimate
// client, and the figures before, during and after.
type attackRun struct {
	v      *victim
	b      *legitBench
	base   procSample
	before benchFigures
	during func() benchFigures
}

// beginAttack starts the watchdog and the legitimate client on d, takes
// the baseline, and returns when the attack may start.
func beginAttack(t *testing.T, d *daemon) *attackRun {
	t.Helper()
	checkLocalClean(t)
	r := &attackRun{v: watchVictim(t, d), b: startLegitBench(t, d)}
	time.Sleep(500 * time.Millisecond) // warm up
	m := r.b.mark()
	time.Sleep(time.Second)
	r.before = m()
	r.before.check(t, r.b, "the baseline")
	r.base = r.v.sampleNow(t)
	r.v.resetPeak()
	r.during = r.b.mark()
	return r
}

// end is called when the attack stopped: it checks the legitimate client
// kept working during it, waits for the victim's figures to settle, checks
// the client still works and logs every figure.
func (r *attackRun) end(t *testing.T) {
	t.Helper()
	during := r.during()
	peak := r.v.peakSample()
	during.check(t, r.b, "the attack")
	after := r.v.settle(t, r.base)
	m := r.b.mark()
	time.Sleep(time.Second)
	afterBench := m()
	afterBench.check(t, r.b, "the recovery")
	t.Logf("victim before: %v; legit %v", r.base, r.before)
	t.Logf("victim during (peak): %v; legit %v", peak, during)
	t.Logf("victim after: %v; legit %v", after, afterBench)
}
