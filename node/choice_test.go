package node

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// Each selection runs its backends in its order, TCP last.
func TestOrder(t *testing.T) {
	for k, want := range map[backend.Kind][]backend.Kind{
		KindAuto:            {backend.KindSHM, backend.KindIBVerbs, backend.KindTCP},
		backend.KindSHM:     {backend.KindSHM, backend.KindTCP},
		backend.KindIBVerbs: {backend.KindIBVerbs, backend.KindTCP},
		backend.KindTCP:     {backend.KindTCP},
	} {
		if got := order(k, false); !slices.Equal(got, want) {
			t.Errorf("order(%s) = %v, want %v", k, got, want)
		}
	}
	// With an agent: right after shm (same host stays on shm).
	for k, want := range map[backend.Kind][]backend.Kind{
		KindAuto:        {backend.KindSHM, backend.KindAgent, backend.KindIBVerbs, backend.KindTCP},
		backend.KindSHM: {backend.KindSHM, backend.KindAgent, backend.KindTCP},
	} {
		if got := order(k, true); !slices.Equal(got, want) {
			t.Errorf("order(%s) with an agent = %v, want %v", k, got, want)
		}
	}
	for _, k := range []backend.Kind{backend.KindTCP, backend.KindIBVerbs} {
		if _, err := (Config{Backend: k, Agent: "/x"}).withDefaults(); !errors.Is(err, rdmamgr.ErrInvalid) {
			t.Errorf("agent with backend %s: %v", k, err)
		}
	}
	c, err := Config{}.withDefaults()
	if err != nil || c.Backend != KindAuto {
		t.Errorf("default backend %q (%v), want auto", c.Backend, err)
	}
}

// The node runs what its selection names, where this build has it: auto
// leaves ibverbs out without it (and shm off Linux), shm and tcp run what
// they say.
func TestSelectionRuns(t *testing.T) {
	if ibverbsBuilt() {
		t.Skip("built with ibverbs: auto may pick a device")
	}
	auto := "shm+tcp"
	if runtime.GOOS != "linux" {
		auto = "tcp"
	}
	for k, want := range map[backend.Kind]string{KindAuto: auto, backend.KindTCP: "tcp", backend.KindSHM: "shm+tcp"} {
		if k == backend.KindSHM && runtime.GOOS != "linux" {
			continue
		}
		n := startNode(t, Config{Backend: k})
		if got := n.Backends(); got != want {
			t.Errorf("backend %s runs %q, want %q", k, got, want)
		}
		if d := n.DataAddr(); !strings.HasPrefix(d, "127.0.0.1:") || d != n.tcp.Addr() {
			t.Errorf("backend %s: data address %q, TCP's %q", k, d, n.tcp.Addr())
		}
	}
}

// syncBuffer is a log sink safe for the node's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A node under auto reaching a TCP-only peer says, in status and in its
// "route up" line, that its route runs on TCP because shm and ibverbs were
// passed over, and why; the peer's status says the route was our choice.
func TestStatusSaysWhyTCP(t *testing.T) {
	ctx := testCtx(t)
	var logs syncBuffer
	a := startNode(t, Config{Backend: KindAuto, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	b := startNode(t, Config{Backend: backend.KindTCP})
	qp, err := a.Client().RequestQueuePair(ctx, b.ManagerPID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	if k := qp.Kind(); k != backend.KindTCP {
		t.Fatalf("queue pair on %s, want tcp", k)
	}
	st, err := a.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Routes) != 1 {
		t.Fatalf("routes %v", st.Routes)
	}
	r := st.Routes[0]
	// shm: the peer runs no shm (or, before backend/shm's routes, shm
	// refuses every peer); ibverbs: not built, no device, or the peer
	// runs none.
	if r.Backend != "tcp" || !strings.HasPrefix(r.Why, "shm: ") || !strings.Contains(r.Why, "; ibverbs: ") {
		t.Errorf("route %v: want backend tcp, why naming shm then ibverbs", r)
	}
	if want := fmt.Sprintf("why=%q", r.Why); !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks the route's %s:\n%s", want, logs.String())
	}
	st, err = b.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Inbound) != 1 || st.Inbound[0].Backend != "tcp" || !strings.HasPrefix(st.Inbound[0].Why, "the peer's choice") {
		t.Errorf("peer's inbound routes %v", st.Inbound)
	}
}
