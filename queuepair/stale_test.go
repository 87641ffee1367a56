package queuepair

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// TestReuseRightAfterCompletion re-arms one WorkRequest as soon as Poll
// reports it done, while the backend completes it from another goroutine,
// and waits for every other use with Wait: a completion must be wholly
// reported before Poll or Wait says so, so the next arm never finds the
// operation pending and the next Wait never returns on the last
// completion's signal. The test hook widens the window in between.
func TestReuseRightAfterCompletion(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	testHookFinishing = func() { time.Sleep(20 * time.Microsecond) }
	defer func() { testHookFinishing = nil }()
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	n := 5000
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case wr := <-e.route.posted:
				complete(wr, nil)
			case <-stop:
				return
			}
		}
	}()
	var w WorkRequest
	for i := range n {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("%v", p)
				}
			}()
			e.qp.PostPut(context.Background(), &w, local, remote)
			if i%2 == 1 {
				err := w.Wait(context.Background())
				if done, _ := w.Poll(); !done {
					return fmt.Errorf("Wait returned (%v) while the operation was pending", err)
				}
				return err
			}
			for {
				if done, err := w.Poll(); done {
					return err
				}
				runtime.Gosched()
			}
		}()
		if err != nil {
			t.Fatalf("use %d: %v", i, err)
		}
	}
}
