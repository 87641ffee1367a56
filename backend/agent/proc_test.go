//go:build linux

package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// proc is one process of a test: its registry, shm backend and agent
// backend.
type proc struct {
	id  uint64
	reg *memreg.Registry
	shm *shm.Backend
	b   *Backend
}

func newProc(t testing.TB, w *world, id uint64, socket string, secret backend.Secret, tweak func(*Config)) *proc {
	t.Helper()
	reg := memreg.NewRegistry(id, buffer.Limits{})
	sb, err := wiring.NewBackend[*shm.Backend](shm.Config{Secret: secret}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Socket: socket, Secret: secret, ManagerID: id, Addr: fmt.Sprintf("proc-%x:1", id), SHM: sb, Retry: 20 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	b, err := New(cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.regs[id] = reg
	w.mu.Unlock()
	t.Cleanup(func() {
		b.Close()
		sb.Close()
		reg.Close(context.Background())
	})
	return &proc{id: id, reg: reg, shm: sb, b: b}
}

// waitAttached waits until p is attached (or fails the test).
func (p *proc) waitAttached(t testing.TB) *attachment {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if a := p.b.current(); a != nil {
			return a
		}
	}
	t.Fatalf("process %x never attached", p.id)
	return nil
}

// routeTo runs the route handshake from p to q (as two managers would).
func routeTo(t testing.TB, p, q *proc) (backend.Route, error) {
	t.Helper()
	ctx := context.Background()
	pr, info, err := p.b.PrepareRoute(ctx, 0)
	if err != nil {
		return nil, err
	}
	ans, err := q.b.AcceptRoute(ctx, p.id, info)
	if err != nil {
		pr.Abort()
		return nil, err
	}
	return pr.Complete(ctx, ans)
}

func sockPath(t testing.TB, name string) string {
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, name)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
