//go:build linux

package hostagent

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes what it started: no goroutine is left once they ran
// (processes' loops, proxy releases, far-route setups, handshakes). The
// actor systems' dead-letter throttle outlives them a while (as in
// package node's tests).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
