//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// TestRunInline: a run handed to RunInline on a mapped region is copied
// in order, each operation's outcome in its errs slot as Post would give
// it (an out-of-range one and a Put to a read-only region fail alone);
// an operation that is not a Put or Get, or does not fit the region,
// fails alone; a run it cannot take now (the region not mapped yet, the
// route ended) is declined whole, with no byte copied and no outcome set.
func TestRunInline(t *testing.T) {
	const tmo = 30 * time.Second
	rt, regA, regB := listPair(t)
	const n, k = 64, 16
	hLocal, local := backendtest.Alloc(t, regA, n*k, buffer.AccessReadWrite)
	hMapped, mapped := backendtest.Alloc(t, regB, n*k, buffer.AccessReadWrite)
	hRO, ro := backendtest.Alloc(t, regB, n, buffer.AccessRead)
	hFresh, fresh := backendtest.Alloc(t, regB, n, buffer.AccessReadWrite)
	for _, h := range []buffer.Buffer{hMapped, hRO} { // maps both
		if err := backendtest.Do(t, tmo, rt, regA, backend.OpRead, backendtest.Slice(t, hLocal, 0, int(h.Length)), h); err != nil {
			t.Fatal(err)
		}
	}
	backendtest.Random(t, local)
	want := bytes.Clone(local)
	ops := make([]qpbind.InlineOp, k)
	errs := make([]error, k)
	for i := range ops {
		ops[i] = qpbind.InlineOp{Local: local[i*n : (i+1)*n], Offset: uint64(i * n), Op: backend.OpWrite}
	}
	ops[3].Offset = n * k // past the region: fails alone
	if failed, ok := rt.RunInline(hMapped.Region, hMapped.Key, ops, errs); !ok || failed != 1 {
		t.Fatalf("RunInline on a mapped region: %d failed, taken %v; want 1, true", failed, ok)
	}
	for i, err := range errs {
		if i == 3 {
			if !errors.Is(err, rdmamgr.ErrOutOfRange) {
				t.Fatalf("Put past the region: %v, want ErrOutOfRange", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	clear(want[3*n : 4*n]) // the one that failed landed nothing
	backendtest.AssertSame(t, "region after the run", mapped, want)

	// Gets back, in order: the last one reads what the first wrote.
	clear(local)
	for i := range ops {
		ops[i] = qpbind.InlineOp{Local: local[i*n : (i+1)*n], Offset: uint64(i * n), Op: backend.OpRead}
	}
	clear(errs) // nil on entry
	if failed, ok := rt.RunInline(hMapped.Region, hMapped.Key, ops, errs); !ok || failed != 0 {
		t.Fatalf("RunInline of Gets: %d failed, taken %v; want 0, true", failed, ok)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
	}
	backendtest.AssertSame(t, "local memory after the Gets", local, want)

	// A read-only region: the Get succeeds, the Put fails alone.
	ro[0] = 0x5A
	two := []qpbind.InlineOp{{Local: local[:n], Op: backend.OpWrite}, {Local: local[n : 2*n], Op: backend.OpRead}}
	clear(errs)
	if failed, ok := rt.RunInline(hRO.Region, hRO.Key, two, errs[:2]); !ok || failed != 1 {
		t.Fatalf("RunInline on a read-only region: %d failed, taken %v; want 1, true", failed, ok)
	}
	if !errors.Is(errs[0], rdmamgr.ErrAccess) || errs[1] != nil || local[n] != 0x5A || ro[1] != 0 {
		t.Fatalf("Put, Get on a read-only region: %v, %v (byte read %#x)", errs[0], errs[1], local[n])
	}

	// Declined whole: nothing copied, no outcome set.
	declined := func(what string, region uint64, key buffer.Key, ops []qpbind.InlineOp) {
		t.Helper()
		for i := range errs {
			errs[i] = errSentinel
		}
		before := bytes.Clone(mapped)
		if _, ok := rt.RunInline(region, key, ops, errs[:len(ops)]); ok {
			t.Fatalf("%s: RunInline took the run", what)
		}
		for i := range errs {
			if errs[i] != errSentinel {
				t.Fatalf("%s: outcome %d set: %v", what, i, errs[i])
			}
		}
		backendtest.AssertSame(t, what+": region", mapped, before)
	}
	put := func(b []byte) qpbind.InlineOp { return qpbind.InlineOp{Local: b, Op: backend.OpWrite} }
	declined("a region not mapped yet", hFresh.Region, hFresh.Key, []qpbind.InlineOp{put(local[:n])})
	if !bytes.Equal(fresh, make([]byte, n)) {
		t.Fatal("the unmapped region changed")
	}
	// An operation that breaks the caller's contract (not a Put or Get;
	// larger than the region) is refused alone; the Put before it lands.
	refusedAlone := func(what string, bad qpbind.InlineOp, want error) {
		t.Helper()
		clear(errs)
		copy(local[:n], bytes.Repeat([]byte{0xC3}, n))
		failed, ok := rt.RunInline(hMapped.Region, hMapped.Key, []qpbind.InlineOp{put(local[:n]), bad}, errs[:2])
		if !ok || failed != 1 || errs[0] != nil || !errors.Is(errs[1], want) {
			t.Fatalf("%s: %d failed, taken %v, outcomes %v, %v; want 1, true, nil, %v", what, failed, ok, errs[0], errs[1], want)
		}
		if mapped[0] != 0xC3 {
			t.Fatalf("%s: the Put before it did not land", what)
		}
	}
	refusedAlone("a Send", qpbind.InlineOp{Local: local[n : 2*n], Op: backend.OpSend}, rdmamgr.ErrInvalid)
	refusedAlone("an operation larger than the region", put(make([]byte, len(mapped)+1)), rdmamgr.ErrOutOfRange)
	rt.fail(rdmamgr.ErrPeerGone)
	declined("the route ended", hMapped.Region, hMapped.Key, []qpbind.InlineOp{put(local[:n])})
}

var errSentinel = errors.New("untouched")
