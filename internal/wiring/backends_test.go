package wiring

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

type fakeConfig struct{ n int }
type fakeBackend struct{ n int }

var errFake = errors.New("fake")

// NewBackend calls the constructor SetBackend recorded for the config's
// type, and panics when none was recorded or B is not what it returns.
func TestNewBackend(t *testing.T) {
	SetBackend(func(c fakeConfig, _ *memreg.Registry, _ *slog.Logger) (*fakeBackend, error) {
		if c.n < 0 {
			return nil, errFake
		}
		return &fakeBackend{n: c.n}, nil
	})
	if b, err := NewBackend[*fakeBackend](fakeConfig{n: 7}, nil, nil); err != nil || b.n != 7 {
		t.Fatalf("NewBackend: %+v, %v", b, err)
	}
	if _, err := NewBackend[*fakeBackend](fakeConfig{n: -1}, nil, nil); !errors.Is(err, errFake) {
		t.Fatalf("constructor's error: %v", err)
	}
	for what, f := range map[string]func(){
		"no constructor": func() { _, _ = NewBackend[*fakeBackend](struct{ x int }{}, nil, nil) },
		"wrong type":     func() { _, _ = NewBackend[fakeBackend](fakeConfig{}, nil, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", what)
				}
			}()
			f()
		}()
	}
}
