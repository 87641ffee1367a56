package cuda_test

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

// failingDriver fails the allocation of a Stager's resources after ok
// calls of HostAlloc and StreamCreate (together) succeeded.
type failingDriver struct {
	cuda.Driver
	ok int
}

var errNoRoom = errors.New("out of pinned memory")

func (d *failingDriver) take() bool {
	d.ok--
	return d.ok >= 0
}

func (d *failingDriver) HostAlloc(ctx cuda.Context, n uint64) ([]byte, error) {
	if !d.take() {
		return nil, errNoRoom
	}
	return d.Driver.HostAlloc(ctx, n)
}

func (d *failingDriver) StreamCreate(ctx cuda.Context) (cuda.Stream, error) {
	if !d.take() {
		return 0, errNoRoom
	}
	return d.Driver.StreamCreate(ctx)
}

// TestNewStagerFailureFreesAll: a Stager whose pinned buffers or streams
// cannot all be made fails with the driver's error (no panic) and frees
// what it made; Stagers.Get passes the error on and stays usable.
func TestNewStagerFailureFreesAll(t *testing.T) {
	for ok := range 4 { // HostAlloc, StreamCreate, HostAlloc, StreamCreate
		e := newFakeEnv(t, cudafake.Config{})
		before := e.w.Stats()
		d := &failingDriver{Driver: e.d, ok: ok}
		s, err := cuda.NewStager(d, e.ctx, testChunk)
		if !errors.Is(err, errNoRoom) || s != nil {
			t.Fatalf("NewStager failing after %d: %v, %v", ok, s, err)
		}
		if st := e.w.Stats(); st.LiveHost != before.LiveHost || st.Streams != before.Streams {
			t.Fatalf("NewStager failing after %d left %d pinned ranges and %d streams (before: %d, %d)",
				ok, st.LiveHost, st.Streams, before.LiveHost, before.Streams)
		}
		p := cuda.NewStagers(testChunk, 0, 0)
		if _, err := p.Get(&failingDriver{Driver: e.d, ok: ok}, e.ctx, 0); !errors.Is(err, errNoRoom) {
			t.Fatalf("Stagers.Get failing after %d: %v", ok, err)
		}
		s, err = p.Get(e.d, e.ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Put(s)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
