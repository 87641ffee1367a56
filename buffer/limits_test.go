package buffer

import (
	"errors"
	"testing"
)

// TestMaxRegion: one request over MaxRegion is refused before any mapping,
// for allocated and for user memory, and changes nothing.
func TestMaxRegion(t *testing.T) {
	g := newReg(t, Limits{MaxRegion: 1 << 20, MaxBytes: 4 << 20, MaxRegions: 8})
	if _, err := g.Allocate(1<<20+1, AccessReadWrite); !errors.Is(err, ErrExhausted) {
		t.Fatalf("allocate over MaxRegion: %v, want ErrExhausted", err)
	}
	if _, err := g.Register(make([]byte, 1<<20+1), AccessReadWrite); !errors.Is(err, ErrExhausted) {
		t.Fatalf("register over MaxRegion: %v, want ErrExhausted", err)
	}
	if _, err := g.Allocate(1<<46, AccessReadWrite); !errors.Is(err, ErrExhausted) {
		t.Fatalf("allocate 64 TiB: %v, want ErrExhausted", err)
	}
	if st := g.Stats(); st.Regions != 0 || st.Bytes != 0 {
		t.Fatalf("refusals changed the registry: %+v", st)
	}
	if _, err := g.Allocate(1<<20, AccessReadWrite); err != nil {
		t.Fatalf("allocate MaxRegion bytes: %v", err)
	}
}
