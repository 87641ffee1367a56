package backendtest

import (
	"bytes"
	"crypto/rand"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Helpers for backend tests: memory, completions, one-shot operations
// and byte comparisons. Backends' own tests use them too.

// Alloc allocates n bytes in reg and returns the handle and its memory.
func Alloc(t testing.TB, reg *memreg.Registry, n int, access buffer.Access) (buffer.Buffer, []byte) {
	t.Helper()
	h, err := reg.Allocate(uint64(n), access)
	if err != nil {
		t.Fatalf("Allocate(%d): %v", n, err)
	}
	mem, err := reg.Bytes(h)
	if err != nil {
		t.Fatalf("Bytes: %v", err)
	}
	return h, mem
}

// Random fills p with crypto/rand bytes.
func Random(t testing.TB, p []byte) {
	t.Helper()
	if _, err := rand.Read(p); err != nil {
		t.Fatalf("rand: %v", err)
	}
}

// RandomData returns n crypto/rand bytes.
func RandomData(t testing.TB, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	Random(t, p)
	return p
}

// Slice returns h[off:off+n].
func Slice(t testing.TB, h buffer.Buffer, off, n int) buffer.Buffer {
	t.Helper()
	s, err := h.Slice(uint64(off), uint64(n))
	if err != nil {
		t.Fatalf("Slice(%d,%d) of %v: %v", off, n, h, err)
	}
	return s
}

// Result is one completion.
type Result struct {
	WR  *backend.WorkRequest
	Err error
}

// Recorder is a Completer that records results on a channel.
type Recorder struct{ ch chan Result }

// NewRecorder returns a recorder that buffers capacity results.
func NewRecorder(capacity int) *Recorder { return &Recorder{ch: make(chan Result, capacity)} }

// Complete implements backend.Completer.
func (r *Recorder) Complete(wr *backend.WorkRequest, err error) { r.ch <- Result{wr, err} }

// Wait returns the next completion, failing the test if none comes.
func (r *Recorder) Wait(t testing.TB, timeout time.Duration) Result {
	t.Helper()
	select {
	case res := <-r.ch:
		return res
	case <-time.After(timeout):
		t.Fatalf("no completion within %v", timeout)
		return Result{}
	}
}

// None asserts that nothing was completed.
func (r *Recorder) None(t testing.TB) {
	t.Helper()
	select {
	case res := <-r.ch:
		t.Fatalf("unexpected completion of %v: %v", res.WR.Op, res.Err)
	default:
	}
}

// Results returns the recorded completions, for a test that waits on
// them itself (in a select, or outside the test's goroutine).
func (r *Recorder) Results() <-chan Result { return r.ch }

// Len returns the number of recorded completions not yet taken.
func (r *Recorder) Len() int { return len(r.ch) }

// NewWR resolves local (a handle of reg) and returns a work request for it.
// The local reference is dropped by the returned release func.
func NewWR(t testing.TB, reg *memreg.Registry, op backend.Op, local, remote buffer.Buffer, deadline time.Time, done backend.Completer) (*backend.WorkRequest, func()) {
	t.Helper()
	ref, err := reg.AcquireLocal(local)
	if err != nil {
		t.Fatalf("AcquireLocal(%v): %v", local, err)
	}
	return &backend.WorkRequest{Op: op, Local: ref.Bytes(), LocalRegion: ref.Region(), Remote: remote, Deadline: deadline, Done: done}, ref.Release
}

// Do posts one operation and returns Post's error or the completion's.
func Do(t testing.TB, timeout time.Duration, rt backend.Route, reg *memreg.Registry, op backend.Op, local, remote buffer.Buffer) error {
	t.Helper()
	wr, release := NewWR(t, reg, op, local, remote, time.Now().Add(timeout), nil)
	defer release()
	return DoWR(t, timeout, rt, wr)
}

// DoWR posts wr with a fresh Recorder as its Completer and returns Post's
// error or the completion's. It fails the test unless wr is completed
// exactly once (or, when Post fails, not at all).
func DoWR(t testing.TB, timeout time.Duration, rt backend.Route, wr *backend.WorkRequest) error {
	t.Helper()
	rec := NewRecorder(1)
	wr.Done = rec
	if err := rt.Post(wr); err != nil {
		rec.None(t)
		return err
	}
	res := rec.Wait(t, timeout+10*time.Second)
	if res.WR != wr {
		t.Fatalf("completion of another work request")
	}
	time.Sleep(time.Millisecond)
	rec.None(t) // exactly once
	return res.Err
}

// FirstDiff returns the first index where a and b differ, -1 if equal.
func FirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// AssertSame fails unless got equals want.
func AssertSame(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs at byte %d of %d", what, FirstDiff(got, want), len(want))
	}
}
