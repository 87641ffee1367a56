package wiring

import (
	"fmt"
	"log/slog"
	"reflect"

	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// constructors maps a backend's config type to its package's constructor.
// Written only by the backend packages' init functions (which all run
// before any other code), read afterwards: no lock.
var constructors = map[reflect.Type]any{}

// SetBackend records the constructor of the backend configured by a C
// (tcp.Config, shm.Config, ibverbs.Config); each backend package calls it
// in its init. A backend is built over a manager's registry, which no
// public signature shows: its constructor is reached only through here.
func SetBackend[C, B any](f func(C, *memreg.Registry, *slog.Logger) (B, error)) {
	constructors[reflect.TypeFor[C]()] = f
}

// NewBackend builds the backend configured by cfg over reg: what its
// package's constructor does (no I/O). B is the type that constructor
// returns (*tcp.Backend, *shm.Backend, backend.Backend for ibverbs). It
// panics when the backend's package is not linked in or B is not that
// type: a mistake in the module, never a runtime condition.
func NewBackend[B, C any](cfg C, reg *memreg.Registry, log *slog.Logger) (B, error) {
	f, ok := constructors[reflect.TypeFor[C]()].(func(C, *memreg.Registry, *slog.Logger) (B, error))
	if !ok {
		panic(fmt.Sprintf("wiring: no constructor of %v from %v", reflect.TypeFor[B](), reflect.TypeFor[C]()))
	}
	return f(cfg, reg, log)
}
