package actor

import (
	"context"
	"sync"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
)

// askReply sends msg to target and waits for the one reply, the timeout,
// ctx's end or stop's close (errAskStopped; nil: never). It replaces protoactor's RequestFuture, whose Future writes
// the reply outside its lock: a reply that arrives as the timeout fires
// races with Result's read (the race detector sees it; a reader could see
// a torn value). Here the reply goes through a channel, taken once. A
// target that does not exist answers protoactor.ErrDeadLetter; no reply
// in time, protoactor.ErrTimeout, as the Future does. A reply arriving
// after askReply returned is dropped.
func askReply(ctx context.Context, sys *protoactor.ActorSystem, target *protoactor.PID, msg any, timeout time.Duration, stop <-chan struct{}) (any, error) {
	r := &replyProcess{ch: make(chan any, 1)}
	pid, _ := sys.ProcessRegistry.Add(r, "reply"+sys.ProcessRegistry.NextId())
	defer sys.ProcessRegistry.Remove(pid)
	sys.Root.RequestWithCustomSender(target, msg, pid)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-r.ch:
		if _, ok := m.(*protoactor.DeadLetterResponse); ok {
			return nil, protoactor.ErrDeadLetter
		}
		return m, nil
	case <-t.C:
		return nil, protoactor.ErrTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-stop:
		return nil, errAskStopped
	}
}

// replyProcess is the process a reply to askReply is sent to: the first
// message wins, later ones are dropped.
type replyProcess struct {
	once sync.Once
	ch   chan any // capacity 1: the first message
}

var _ protoactor.Process = (*replyProcess)(nil)

// SendUserMessage implements protoactor.Process.
func (r *replyProcess) SendUserMessage(_ *protoactor.PID, m any) {
	_, msg, _ := protoactor.UnwrapEnvelope(m)
	r.deliver(msg)
}

// SendSystemMessage implements protoactor.Process (as the Future does:
// a system message is the reply).
func (r *replyProcess) SendSystemMessage(_ *protoactor.PID, m any) { r.deliver(m) }

// Stop implements protoactor.Process: askReply removes the process itself.
func (r *replyProcess) Stop(*protoactor.PID) {}

func (r *replyProcess) deliver(m any) { r.once.Do(func() { r.ch <- m }) }
