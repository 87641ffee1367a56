package routestate

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func TestValidate(t *testing.T) {
	mem := make([]byte, 16)
	for _, tc := range []struct {
		name string
		wr   *backend.WorkRequest
		want error
	}{
		{"write", &backend.WorkRequest{Op: backend.OpWrite, Local: mem, Remote: buffer.Buffer{Length: 16}}, nil},
		{"read at an offset", &backend.WorkRequest{Op: backend.OpRead, Local: mem, Remote: buffer.Buffer{Offset: 100, Length: 16}}, nil},
		{"empty", &backend.WorkRequest{Op: backend.OpWrite, Remote: buffer.Buffer{}}, rdmamgr.ErrProtocol},
		{"lengths differ", &backend.WorkRequest{Op: backend.OpWrite, Local: mem, Remote: buffer.Buffer{Length: 17}}, rdmamgr.ErrProtocol},
		{"unknown op", &backend.WorkRequest{Op: 99, Local: mem, Remote: buffer.Buffer{Length: 16}}, rdmamgr.ErrProtocol},
		{"no op", &backend.WorkRequest{Local: mem, Remote: buffer.Buffer{Length: 16}}, rdmamgr.ErrProtocol},
		{"offset overflows", &backend.WorkRequest{Op: backend.OpRead, Local: mem, Remote: buffer.Buffer{Offset: math.MaxUint64 - 8, Length: 16}}, rdmamgr.ErrOutOfRange},
		{"end at the top", &backend.WorkRequest{Op: backend.OpRead, Local: mem, Remote: buffer.Buffer{Offset: math.MaxUint64 - 16, Length: 16}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate("test", tc.wr)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Validate: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSetFailedOnce(t *testing.T) {
	var s State
	s.Init()
	if s.Err() != nil {
		t.Fatalf("Err of a fresh state: %v", s.Err())
	}
	select {
	case <-s.Done():
		t.Fatal("Done closed before SetFailed")
	default:
	}
	first, second := errors.New("first"), errors.New("second")
	var wg sync.WaitGroup
	wins := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			err := second
			if i == 0 {
				err = first
			}
			if s.SetFailed(err) {
				wins <- err
			}
		})
	}
	wg.Wait()
	close(wins)
	var won []error
	for e := range wins {
		won = append(won, e)
	}
	if len(won) != 1 {
		t.Fatalf("%d callers were told they failed the route, want 1", len(won))
	}
	if s.Err() != won[0] {
		t.Fatalf("Err = %v, want the winner's %v", s.Err(), won[0])
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after SetFailed")
	}
}

func TestStats(t *testing.T) {
	var s State
	s.Init()
	put := &backend.WorkRequest{Op: backend.OpWrite, Local: make([]byte, 10)}
	get := &backend.WorkRequest{Op: backend.OpRead, Local: make([]byte, 7)}
	if !s.Begin() {
		t.Fatal("first Begin: not idle before")
	}
	for range 3 {
		if s.Begin() {
			t.Fatal("Begin with work in flight reported idle")
		}
	}
	s.Unbegin()
	if got := s.InFlight(); got != 3 {
		t.Fatalf("InFlight = %d, want 3", got)
	}
	s.End(put, nil)
	s.End(get, nil)
	s.End(get, errors.New("failed"))
	want := backend.RouteStats{Ops: 2, BytesPut: 10, BytesGot: 7, Errors: 1}
	if st := s.Stats(); st != want {
		t.Fatalf("Stats = %+v, want %+v", st, want)
	}
}

func TestOpError(t *testing.T) {
	wr := &backend.WorkRequest{Op: backend.OpRead, Local: make([]byte, 5)}
	err := OpError("tcp", wr, rdmamgr.ErrDeadline)
	if !errors.Is(err, rdmamgr.ErrDeadline) || err.Error() != "tcp: read of 5 bytes: deadline exceeded" {
		t.Fatalf("OpError = %q", err)
	}
}

// TestCountInline: outcomes counted inside Post (Count, CountMany) reach
// the counters and never the in-flight figure.
func TestCountInline(t *testing.T) {
	var s State
	s.Init()
	s.Count(&backend.WorkRequest{Op: backend.OpWrite, Local: make([]byte, 10)}, nil)
	s.Count(&backend.WorkRequest{Op: backend.OpRead, Local: make([]byte, 7)}, nil)
	s.Count(&backend.WorkRequest{Op: backend.OpRead, Local: make([]byte, 7)}, rdmamgr.ErrAccess)
	s.CountMany(3, 100, 50, 2)
	want := backend.RouteStats{Ops: 5, BytesPut: 110, BytesGot: 57, Errors: 3}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

// TestEndTally: a batch's outcomes added to a Tally and ended at once
// count as End of each would, in flight included, and empty the Tally.
func TestEndTally(t *testing.T) {
	var s State
	s.Init()
	for range 5 {
		s.Begin()
	}
	var tl Tally
	tl.Add(&backend.WorkRequest{Op: backend.OpWrite, Local: make([]byte, 10)}, nil)
	tl.Add(&backend.WorkRequest{Op: backend.OpSend, Local: make([]byte, 3)}, nil)
	tl.Add(&backend.WorkRequest{Op: backend.OpRead, Local: make([]byte, 7)}, nil)
	tl.Add(&backend.WorkRequest{Op: backend.OpRead, Local: make([]byte, 7)}, rdmamgr.ErrAccess)
	s.EndTally(&tl)
	want := backend.RouteStats{Ops: 3, BytesPut: 13, BytesGot: 7, Errors: 1, InFlight: 1}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	if tl != (Tally{}) {
		t.Fatalf("Tally after EndTally = %+v, want empty", tl)
	}
	s.EndTally(&tl) // empty: nothing changes
	if got := s.Stats(); got != want {
		t.Fatalf("Stats after an empty EndTally = %+v, want %+v", got, want)
	}
}
