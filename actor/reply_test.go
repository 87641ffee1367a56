package actor

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
)

// TestAskReply: a reply, a target that is not there (ErrDeadLetter), no
// reply (ErrTimeout), ctx's end, the stop channel; and replies racing the
// timeout (protoactor's Future wrote a reply arriving as its timeout fired
// outside its lock, racing with Result: the race detector failed a
// process of test/agenthosts on it), each outcome one or the other, and
// no reply process left registered.
func TestAskReply(t *testing.T) {
	sys := protoactor.NewActorSystem()
	defer sys.Shutdown()
	echo, err := sys.Root.SpawnNamed(protoactor.PropsFromFunc(func(c protoactor.Context) {
		if d, ok := c.Message().(time.Duration); ok {
			time.Sleep(d)
			c.Respond(d)
		}
	}), "echo")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, err := askReply(ctx, sys, echo, time.Duration(0), time.Second, nil); err != nil || v != time.Duration(0) {
		t.Fatalf("reply: %v, %v", v, err)
	}
	if _, err := askReply(ctx, sys, protoactor.NewPID(sys.Address(), "nobody"), time.Duration(0), time.Second, nil); !errors.Is(err, protoactor.ErrDeadLetter) {
		t.Fatalf("no target: %v, want ErrDeadLetter", err)
	}
	if _, err := askReply(ctx, sys, echo, 50*time.Millisecond, time.Millisecond, nil); !errors.Is(err, protoactor.ErrTimeout) {
		t.Fatalf("slow target: %v, want ErrTimeout", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := askReply(cctx, sys, echo, 50*time.Millisecond, time.Second, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended ctx: %v", err)
	}
	stop := make(chan struct{})
	close(stop)
	if _, err := askReply(ctx, sys, echo, 50*time.Millisecond, time.Second, stop); !errors.Is(err, errAskStopped) {
		t.Fatalf("stopped: %v", err)
	}
	const timeout = 200 * time.Microsecond
	for range 300 {
		d := time.Duration(rand.Int64N(int64(2 * timeout)))
		v, err := askReply(ctx, sys, echo, d, timeout, nil)
		if !(err == nil && v == d) && !errors.Is(err, protoactor.ErrTimeout) {
			t.Fatalf("reply after %v to an ask of %v: %v, %v", d, timeout, v, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the last replies land, and are dropped
	left := 0
	for _, m := range sys.ProcessRegistry.LocalPIDs.LocalPIDs {
		for _, id := range m.Keys() {
			if strings.HasPrefix(id, "reply") {
				left++
			}
		}
	}
	if left != 0 {
		t.Errorf("%d reply processes still registered after the asks", left)
	}
}
