//go:build linux

// TestHostile: the environment every hostile case works against, the case
// type, and the test that runs the groups of cases in order, checking after
// each that the daemon's memory is unchanged and that it still serves. The
// cases are in hostile_handles_test.go, hostile_data_test.go and
// hostile_control_test.go; the environment's checks and helpers in
// hostile_env_test.go.

package test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

const (
	hostileBufSize = 1 << 20
	hostileOpSize  = 64 << 10
)

// hostileEnv is what every hostile case works against: a daemon with a
// read-write buffer holding a known pattern and a read-only buffer that
// must stay zero.
type hostileEnv struct {
	d        *daemon
	dataAddr string
	qp       *queuepair.QueuePair

	rw, ro  buffer.Buffer // at the daemon
	scratch buffer.Buffer // at the daemon: the liveness check writes here
	pattern []byte        // rw's contents

	src, dst       buffer.Buffer // local
	srcMem, dstMem []byte
	r              *rand.Rand

	broken bool // a case left the daemon unable to serve
}

type hostileCase struct {
	name string
	// run does the hostile thing and returns the error it got.
	run func(t *testing.T, ctx context.Context, h *hostileEnv) error
	// want: run's error must match one of these with errors.Is.
	want []error
}

// TestHostile throws bad handles, forged and garbage connections,
// malformed frames and unknown messages at a daemon. Each case checks the
// sentinel of the error, that the daemon's memory is unchanged (the
// read-write buffer still holds its pattern, the read-only one is still
// zero) and that the daemon still serves puts, gets and status.
func TestHostile(t *testing.T) {
	checkLocalClean(t)
	h := newHostileEnv(t)

	cases := slices.Concat(hostileHandleCases(), hostileDataCases(), hostileControlCases())
	for _, tc := range cases {
		if h.broken {
			t.Fatalf("the daemon stopped serving: the remaining cases would only repeat that\nstderr:\n%s", h.d.stderr)
		}
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			ctx := testCtx(t, 60*time.Second)
			err := tc.run(t, ctx, h)
			if !isAny(err, tc.want) {
				t.Errorf("got error %v; want one matching %v", err, tc.want)
			} else {
				t.Logf("got %v", err)
			}
			h.checkIntact(t)
			h.checkServing(t)
		})
	}

	st, err := h.d.client().Status(testCtx(t, 30*time.Second))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.RejectedOps == 0 {
		t.Errorf("the daemon counted no rejected operations")
	}
}
