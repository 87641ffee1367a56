//go:build !ibverbs

package ibverbs

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

const wantMsg = "ibverbs: not built with ibverbs support (build with -tags ibverbs)"

func checkNotBuilt(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error from the stub", what)
	}
	if !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Errorf("%s: %v does not wrap rdmamgr.ErrNotSupported", what, err)
	}
	if !errors.Is(err, ErrNotBuilt) {
		t.Errorf("%s: %v is not ErrNotBuilt", what, err)
	}
	if err.Error() != wantMsg {
		t.Errorf("%s: message %q, want %q", what, err.Error(), wantMsg)
	}
}

func TestNewNotBuilt(t *testing.T) {
	reg := memreg.NewRegistry(1, buffer.Limits{})
	b, err := newIBVerbs(Config{Device: "mlx5_0", Port: 1, GIDIndex: 3}, reg, slog.Default())
	checkNotBuilt(t, "New", err)
	if b != nil {
		t.Errorf("New returned a backend %v with its error", b)
	}
	_, err = newIBVerbs(Config{}, nil, nil)
	checkNotBuilt(t, "newIBVerbs(zero config)", err)
}

func TestDevicesNotBuilt(t *testing.T) {
	devs, err := Devices()
	checkNotBuilt(t, "Devices", err)
	if devs != nil {
		t.Errorf("Devices returned %v with its error", devs)
	}
}
