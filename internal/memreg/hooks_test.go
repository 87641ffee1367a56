package memreg

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
)

type recHooks struct {
	mu       sync.Mutex
	reg      map[*Region]bool
	failNext bool
	log      []string
	t        *testing.T
}

func (h *recHooks) RegisterRegion(r *Region) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failNext {
		h.failNext = false
		return errors.New("hw says no")
	}
	if h.reg == nil {
		h.reg = map[*Region]bool{}
	}
	h.reg[r] = true
	r.BackendData = "mr"
	h.log = append(h.log, "reg")
	return nil
}

func (h *recHooks) DeregisterRegion(r *Region) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.reg[r] {
		h.t.Errorf("deregister of a region not registered")
	}
	if r.Released() { // not released: a registration undone before the region became visible
		select {
		case <-r.Drained():
		default:
			h.t.Errorf("deregister before the region drained")
		}
	}
	delete(h.reg, r)
	h.log = append(h.log, "dereg")
	return nil
}

func TestHooks(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	h1, h2 := &recHooks{t: t}, &recHooks{t: t}
	g.AddHooks(h1)
	g.AddHooks(h2)
	b := mustAlloc(t, g, 10, buffer.AccessRead)
	r := g.Regions()[0]
	if r.BackendData != "mr" || len(h1.reg) != 1 || len(h2.reg) != 1 {
		t.Fatalf("hooks not run: %v %v", h1.log, h2.log)
	}
	if err := g.Release(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if len(h1.reg) != 0 || len(h2.reg) != 0 {
		t.Errorf("hooks not deregistered: %v %v", h1.log, h2.log)
	}

	// A failing hook undoes the hooks before it and leaves nothing behind.
	h2.failNext = true
	_, err := g.Register(make([]byte, 10), buffer.AccessRead)
	if err == nil || err.Error() == "" {
		t.Fatalf("Register with failing hook: %v", err)
	}
	if len(h1.reg) != 0 || len(h2.reg) != 0 {
		t.Errorf("failed registration left hook state: %v %v", h1.log, h2.log)
	}
	if st := g.Stats(); !idle(st) {
		t.Errorf("failed registration left %+v", st)
	}
}
