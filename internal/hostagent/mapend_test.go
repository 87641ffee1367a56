//go:build linux

package hostagent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// slowGate is a proxy gate that records its Close.
type slowGate struct{ closed atomic.Bool }

func (g *slowGate) Enter() error          { return nil }
func (g *slowGate) Leave()                {}
func (g *slowGate) Close()                { g.closed.Store(true) }
func (g *slowGate) Access() buffer.Access { return buffer.AccessReadWrite }

// slowMapRoute is a process's shm route whose MapProxy answers when
// unblock is closed (a mapping under way while the process goes).
type slowMapRoute struct {
	mapping chan struct{} // closed when MapProxy was called
	unblock chan struct{}
	gate    slowGate
	done    chan struct{}
}

func (r *slowMapRoute) MapProxy(ctx context.Context, region uint64, key buffer.Key, need buffer.Access) ([]byte, memreg.Gate, error) {
	close(r.mapping)
	<-r.unblock
	return make([]byte, 4096), &r.gate, nil
}
func (r *slowMapRoute) Notify(context.Context, uint64, uint64, uint64, uint32, uint64) error {
	return rdmamgr.ErrNotSupported
}
func (r *slowMapRoute) OnCut(func(uint64))              {}
func (r *slowMapRoute) Post(*backend.WorkRequest) error { return rdmamgr.ErrNotSupported }
func (r *slowMapRoute) Done() <-chan struct{}           { return r.done }
func (r *slowMapRoute) Cancel(*backend.WorkRequest)     {}
func (r *slowMapRoute) Err() error                      { return nil }
func (r *slowMapRoute) Stats() backend.RouteStats       { return backend.RouteStats{} }
func (r *slowMapRoute) Close() error                    { return nil }

var _ wiring.ProxyRoute = (*slowMapRoute)(nil)

// A mapping under way (a Resolve's) when the process goes is waited for by
// its end, and the proxy it makes released before the agent's Close (end,
// then a.wg) returns: before, end left it behind, and the proxy was
// registered, and released in a goroutine of a.wg, after Close returned.
func TestEndWaitsForMapping(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := fdFile(fd)
		c, err := net.FileConn(f) // a dup: f goes
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	reg := memreg.NewRegistry(1, buffer.Limits{})
	a := &Agent{reg: reg, log: slog.New(slog.DiscardHandler), procs: map[uint16]*proc{}}
	rt := &slowMapRoute{mapping: make(chan struct{}), unblock: make(chan struct{}), done: make(chan struct{})}
	p := &proc{a: a, conn: conns[0], route: rt, pr: rt, posts: make(chan *op, 4), dead: make(chan struct{}),
		wake: make(chan struct{}, 1), ops: map[uint64]*op{}, proxies: map[uint64]*proxy{}}
	p.ctx, p.stop = context.WithCancel(context.Background())
	resolved := make(chan error, 1)
	go func() {
		_, err := p.proxyOf(context.Background(), 5, buffer.Key{1}, buffer.AccessRead)
		resolved <- err
	}()
	<-rt.mapping
	go func() { time.Sleep(100 * time.Millisecond); close(rt.unblock) }()
	p.end(errors.New("test: the process goes"))
	a.wg.Wait() // as Close does after ending its processes
	if !rt.gate.closed.Load() {
		t.Fatal("the proxy mapped while the process went is not released when Close returns")
	}
	if n := len(reg.Regions()); n != 0 {
		t.Fatalf("%d regions left in the registry", n)
	}
	if err := <-resolved; !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("the mapping's caller: %v", err)
	}
}

func fdFile(fd int) *os.File { return os.NewFile(uintptr(fd), "socketpair") }
