//go:build linux

package test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
)

// The soak's daemons (soak_test.go): each lives at one fixed address and is
// killed and restarted there; every run of its process is an incarnation.

// fixedDaemon is a daemon that can be killed and restarted at one fixed
// address: its manager's PID stays the same across restarts, its manager
// (id, buffers, data address) does not. Each run of the process is an
// incarnation.
type fixedDaemon struct {
	name   string
	listen string // 127.0.0.1:PORT
	pid    *protoactor.PID

	mu      sync.Mutex
	d       *daemon // the running incarnation; nil while down
	incs    []*incarnation
	retries int // restarts that found the port taken and tried again
}

type incarnation struct {
	d       *daemon
	spawned time.Time // before the process started
	ready   time.Time // when it printed its ready line
	killed  time.Time // zero while it runs
}

// startFixedDaemons starts n daemons at fixed addresses; one cleanup stops
// the incarnations running when the test ends (SIGTERM; each must exit 0).
func startFixedDaemons(t *testing.T, n int) []*fixedDaemon {
	t.Helper()
	return startAll(t, n, startFixedDaemon)
}

// startFixedDaemon picks a free port and starts a daemon there.
func startFixedDaemon(name string) (*fixedDaemon, error) {
	var last error
	for range 10 {
		port, err := freeFixedPort()
		if err != nil {
			return nil, err
		}
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		f := &fixedDaemon{name: name, listen: listen, pid: protoactor.NewPID(listen, actor.DefaultName)}
		spawned := time.Now()
		d, err := spawnDaemon(name, listen)
		if err != nil {
			last = err // taken between the probe and the daemon's listen
			continue
		}
		f.d = d
		f.incs = append(f.incs, &incarnation{d: d, spawned: spawned, ready: time.Now()})
		return f, nil
	}
	return nil, fmt.Errorf("%s: no port: %w", name, last)
}

// freeFixedPort returns a loopback port nothing listens on. It prefers
// ports below the kernel's ephemeral range: while a daemon is down no
// outgoing connection (nor a listener on port 0) can take its port, so it
// comes back at the same address.
func freeFixedPort() (int, error) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscan(string(b), &lo)
	}
	if lo > 11000 {
		for range 100 {
			p := 10000 + rand.IntN(lo-10000)
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// gen returns the number of incarnations started so far.
func (f *fixedDaemon) gen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.incs)
}

func (f *fixedDaemon) incarnations() []incarnation {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]incarnation, len(f.incs))
	for i, inc := range f.incs {
		out[i] = *inc
	}
	return out
}

func (f *fixedDaemon) portRetries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.retries
}

// current returns the running incarnation's process (nil while down).
func (f *fixedDaemon) current() *daemon {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.d
}

// inKillWindow reports whether an error on something the caller set up
// when the daemon's incarnation was gen is explained by a kill: the daemon
// is down, was killed since, or was restarted less than soakGrace ago.
func (f *fixedDaemon) inKillWindow(gen int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.d == nil || len(f.incs) != gen {
		return true
	}
	return len(f.incs) > 1 && time.Since(f.incs[len(f.incs)-1].ready) < soakGrace
}

// kill SIGKILLs the running incarnation and waits for it to go.
func (f *fixedDaemon) kill() error {
	f.mu.Lock()
	d := f.d
	if d == nil {
		f.mu.Unlock()
		return fmt.Errorf("%s: kill: not running", f.name)
	}
	f.d = nil
	f.incs[len(f.incs)-1].killed = time.Now()
	f.mu.Unlock()
	select {
	case <-d.p.Done():
		return fmt.Errorf("%s exited before it was killed: %v\nstderr:\n%s", d.name, d.p.Wait(), d.stderr)
	default:
	}
	return d.p.Kill()
}

// restart starts a new incarnation at the same address; it tries again
// for a while if the port is still taken.
func (f *fixedDaemon) restart() error {
	var last error
	for try := range 20 {
		spawned := time.Now()
		d, err := spawnDaemon(fmt.Sprintf("%s#%d", f.name, f.gen()+1), f.listen)
		if err == nil {
			f.mu.Lock()
			f.d = d
			f.incs = append(f.incs, &incarnation{d: d, spawned: spawned, ready: time.Now()})
			f.mu.Unlock()
			return nil
		}
		last = err
		if try == 0 {
			f.mu.Lock()
			f.retries++
			f.mu.Unlock()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s: restart at %s: %w", f.name, f.listen, last)
}

// signal sends sig to the running incarnation.
func (f *fixedDaemon) signal(sig syscall.Signal) error {
	d := f.current()
	if d == nil {
		return fmt.Errorf("%s: %v: not running", f.name, sig)
	}
	return d.p.Signal(sig)
}

// stop stops the running incarnation: SIGCONT, then SIGTERM; it must exit
// 0. (kill reports an earlier incarnation that exited on its own.)
func (f *fixedDaemon) stop(t *testing.T) {
	if d := f.current(); d != nil {
		_ = d.p.Signal(syscall.SIGCONT)
		d.stop(t)
	}
}

// logStderr logs the stderr of every incarnation (after a failure).
func (f *fixedDaemon) logStderr(t *testing.T) {
	for i, inc := range f.incarnations() {
		if s := inc.d.stderr.String(); s != "" {
			t.Logf("%s incarnation %d stderr:\n%s", f.name, i+1, s)
		}
	}
}
