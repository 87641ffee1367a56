//go:build linux

package shm_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// agentPair is a process (the owner) and its host agent: an shm initiator
// whose route the owner accepted as its agent's (or, agent false, as any
// peer's).
type agentPair struct {
	owner, agent *shm.Backend
	regO, regA   *memreg.Registry
	route        backend.Route
	proxy        wiring.ProxyRoute
}

func plainBackend(t *testing.T, id uint64, cfg shm.Config) (*shm.Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(id, buffer.Limits{})
	b, err := shm.New(cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	backendtest.CloseAtCleanup(t, timeout, b, reg)
	return b, reg
}

func newAgentPair(t *testing.T, agent bool, cfg shm.Config) *agentPair {
	t.Helper()
	p := &agentPair{}
	p.owner, p.regO = plainBackend(t, backendtest.OwnerB, shm.Config{})
	p.agent, p.regA = plainBackend(t, backendtest.OwnerA, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pending, info, err := p.agent.PrepareRoute(ctx, backendtest.OwnerB)
	if err != nil {
		t.Fatal(err)
	}
	var ans []byte
	if agent {
		ans, err = wiring.SHMAcceptAgentRoute(p.owner, ctx, backendtest.OwnerA, info)
	} else {
		ans, err = p.owner.AcceptRoute(ctx, backendtest.OwnerA, info)
	}
	if err != nil {
		pending.Abort()
		t.Fatal(err)
	}
	if p.route, err = pending.Complete(ctx, ans); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.route.Close() })
	var ok bool
	if p.proxy, ok = p.route.(wiring.ProxyRoute); !ok {
		t.Fatal("an shm route is not a wiring.ProxyRoute")
	}
	return p
}

// mapProxy maps region h of the owner and registers it as a proxy in the
// agent's registry.
func (p *agentPair) mapProxy(t *testing.T, h buffer.Buffer, need buffer.Access) (buffer.Buffer, wiring.ProxyGate) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	mem, gate, err := p.proxy.MapProxy(ctx, h.Region, h.Key, need)
	if err != nil {
		t.Fatalf("MapProxy: %v", err)
	}
	if uint64(len(mem)) != h.Length {
		t.Fatalf("proxy of %d bytes, region of %d", len(mem), h.Length)
	}
	pg := gate.(wiring.ProxyGate)
	ph, err := p.regA.RegisterProxy(mem, pg.Access(), gate)
	if err != nil {
		t.Fatalf("RegisterProxy: %v", err)
	}
	return ph, pg
}

func ownerBytes(t *testing.T, reg *memreg.Registry, h buffer.Buffer) []byte {
	t.Helper()
	b, err := reg.Bytes(h)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The owner's cut notice reaches the agent before the owner waits for the
// region's users: the agent revokes (or releases) its proxy, which cuts
// the data plane holding a Ref into it, and the owner's Revoke or Release
// returns without the give-up (the give-up bound is set past the test's
// timeout, so on an owner that sends no notice this test times out, and a
// give-up would have ended the route).
func TestAgentCutNoticeBeforeDrain(t *testing.T) {
	defer shm.SetStuckBound(10 * timeout)()
	for _, how := range []string{"revoke", "release"} {
		t.Run(how, func(t *testing.T) {
			p := newAgentPair(t, true, shm.Config{})
			h, _ := backendtest.Alloc(t, p.regO, 64<<10, buffer.AccessReadWrite|buffer.AccessNotify)
			var proxyH atomic.Pointer[buffer.Buffer]
			var cutRegions sync.Map
			agentDone := make(chan error, 1)
			p.proxy.OnCut(func(region uint64) {
				cutRegions.Store(region, true)
				ph := proxyH.Load()
				if ph == nil || ph.Region == 0 {
					return
				}
				go func() { // OnCut must not block
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					defer cancel()
					agentDone <- p.regA.Release(ctx, *ph)
				}()
			})
			// The agent's data plane: a Ref in flight, given up when cut.
			dataCut := make(chan struct{})
			var cutOnce sync.Once
			p.regA.AddCutter(memreg.CutterFunc(func(*memreg.Region) { cutOnce.Do(func() { close(dataCut) }) }))

			ph, gate := p.mapProxy(t, h, buffer.AccessWrite)
			proxyH.Store(&ph)
			ref, err := p.regA.AcquireRemote(ph.Region, ph.Key, 100, 8, buffer.AccessWrite)
			if err != nil {
				t.Fatalf("AcquireRemote of the proxy: %v", err)
			}
			copy(ref.Bytes(), "through!")
			if got := string(ownerBytes(t, p.regO, h)[100:108]); got != "through!" {
				t.Fatalf("owner sees %q, want the agent's bytes", got)
			}
			holderDone := make(chan struct{})
			go func() {
				defer close(holderDone)
				<-dataCut
				ref.Release()
			}()

			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			var cutErr error
			if how == "revoke" {
				cutErr = p.regO.Revoke(ctx, h)
			} else {
				cutErr = p.regO.Release(ctx, h)
			}
			if cutErr != nil {
				t.Fatalf("owner's %s with the agent's Ref in flight: %v", how, cutErr)
			}
			<-holderDone
			if _, ok := cutRegions.Load(h.Region); !ok {
				t.Fatal("OnCut was not called with the cut region")
			}
			if err := p.route.Err(); err != nil {
				t.Fatalf("the route ended (%v): the owner gave up instead of being answered", err)
			}
			select {
			case err := <-agentDone:
				if err != nil {
					t.Fatalf("agent's Release of the proxy: %v", err)
				}
			case <-time.After(timeout):
				t.Fatal("agent's Release of the proxy did not return")
			}
			if err := gate.Enter(); err == nil {
				gate.Leave()
				t.Fatal("the gate of a cut region admits a user")
			}
			if _, err := p.regA.AcquireRemote(ph.Region, ph.Key, 0, 8, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrReleased) {
				t.Fatalf("AcquireRemote of the released proxy: %v", err)
			}
		})
	}
}

// An agent that ignores the cut notice (no OnCut: an initiator that does
// not know msgCut) still works: the notice does not disturb its route, and
// the owner's Revoke waits for the proxy's user as for a copy, returning
// once it leaves.
func TestAgentIgnoresCutNotice(t *testing.T) {
	defer shm.SetStuckBound(10 * timeout)()
	p := newAgentPair(t, true, shm.Config{})
	h, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite)
	ph, gate := p.mapProxy(t, h, buffer.AccessRead)
	ref, err := p.regA.AcquireRemote(ph.Region, ph.Key, 0, 8, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	revoked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		revoked <- p.regO.Revoke(ctx, h)
	}()
	// The slot is cut (the gate refuses new users) while the Ref holds it.
	deadline := time.Now().Add(timeout)
	for {
		if err := gate.Enter(); err != nil {
			if !errors.Is(err, rdmamgr.ErrRevoked) {
				t.Fatalf("gate of a revoked region: %v", err)
			}
			break
		}
		gate.Leave()
		if time.Now().After(deadline) {
			t.Fatal("the gate never saw the revocation")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-revoked:
		t.Fatalf("owner's Revoke returned (%v) with the proxy's user in the slot", err)
	case <-time.After(50 * time.Millisecond):
	}
	ref.Release()
	if err := <-revoked; err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := p.route.Err(); err != nil {
		t.Fatalf("route ended: %v", err)
	}
	// The route still works.
	h2, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite)
	l, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	if err := backendtest.Do(t, timeout, p.route, p.regA, backend.OpWrite, l, h2); err != nil {
		t.Fatalf("Put after the notice: %v", err)
	}
	releaseProxy(t, p.regA, ph)
}

func releaseProxy(t *testing.T, reg *memreg.Registry, ph buffer.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := reg.Release(ctx, ph); err != nil {
		t.Fatalf("Release of the proxy: %v", err)
	}
}

// On the wire: only the owner's agent gets msgCut, before msgGone; any
// other peer (whatever its version) gets msgGone alone, as before.
func TestAgentCutNoticeOnlyToAgent(t *testing.T) {
	for _, agent := range []bool{false, true} {
		owner, reg := plainBackend(t, backendtest.OwnerB, shm.Config{})
		h, _ := backendtest.Alloc(t, reg, 4096, buffer.AccessReadWrite)
		r := dialRaw(t, owner)
		r.hello(t)
		info := shm.EncodeInfo(uint32(os.Getpid()), uint32(os.Getuid()))
		var ans []byte
		var err error
		if agent {
			ans, err = wiring.SHMAcceptAgentRoute(owner, context.Background(), backendtest.OwnerA, info)
		} else {
			ans, err = owner.AcceptRoute(context.Background(), backendtest.OwnerA, info)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, tok, err := shm.DecodeAnswer(ans)
		if err != nil {
			t.Fatal(err)
		}
		r.auth(t, tok, nil)
		if code, fds := r.welcome(t); code != 0 || fds != 1 {
			t.Fatalf("welcome %d, %d fds", code, fds)
		}
		r.write(t, shm.EncodeMap(1, h.Region, h.Key, byte(buffer.AccessRead)))
		if m, fds, err := r.read(); err != nil || m[0] != shm.MsgMapped || len(fds) != 1 {
			t.Fatalf("map reply %x, %d fds, %v", m, len(fds), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if err := reg.Revoke(ctx, h); err != nil {
			t.Fatal(err)
		}
		cancel()
		var types []byte
		for len(types) == 0 || types[len(types)-1] != shm.MsgGone {
			m, _, err := r.read()
			if err != nil {
				t.Fatalf("agent %v: after %v: %v", agent, types, err)
			}
			types = append(types, m[0])
		}
		want := []byte{shm.MsgGone}
		if agent {
			want = []byte{shm.MsgCut, shm.MsgGone}
		}
		if string(types) != string(want) {
			t.Fatalf("agent %v: owner sent %v, want %v", agent, types, want)
		}
	}
}
