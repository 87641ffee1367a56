package backendtest

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Data movement: every byte of every size and offset lands where it
// should and nowhere else, under load too, and is counted.

func testPutGet(t *testing.T, f Factory) {
	p := NewPair(t, f)
	sizes := []int{1, 3, 4096, 64<<10 + 7, 1<<20 + 13, f.MaxSize}
	type offs struct{ local, remote int }
	const maxOff = 4093
	for _, n := range sizes {
		cases := []offs{{0, 0}, {1, maxOff}, {maxOff, 1}}
		if n >= 4<<20 {
			cases = cases[:2] // keep the largest moves few
		}
		size := n + maxOff + 3
		ha, la := Alloc(t, p.RegA, size, buffer.AccessReadWrite)
		hb, lb := Alloc(t, p.RegB, size, buffer.AccessReadWrite)
		for _, o := range cases {
			name := fmt.Sprintf("%d bytes local+%d remote+%d", n, o.local, o.remote)
			// Put: the remote range gets the local bytes, nothing else changes.
			Random(t, la)
			Random(t, lb)
			wantB := bytes.Clone(lb)
			copy(wantB[o.remote:o.remote+n], la[o.local:o.local+n])
			wantA := bytes.Clone(la)
			if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, Slice(t, ha, o.local, n), Slice(t, hb, o.remote, n)); err != nil {
				t.Fatalf("put %s: %v", name, err)
			}
			AssertSame(t, "remote after put "+name, lb, wantB)
			AssertSame(t, "local after put "+name, la, wantA)
			// Get: the local range gets the remote bytes, nothing else changes.
			Random(t, la)
			Random(t, lb)
			wantA = bytes.Clone(la)
			copy(wantA[o.local:o.local+n], lb[o.remote:o.remote+n])
			wantB = bytes.Clone(lb)
			if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, Slice(t, ha, o.local, n), Slice(t, hb, o.remote, n)); err != nil {
				t.Fatalf("get %s: %v", name, err)
			}
			AssertSame(t, "local after get "+name, la, wantA)
			AssertSame(t, "remote after get "+name, lb, wantB)
		}
		if err := p.RegA.Release(context.Background(), ha); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := p.RegB.Release(context.Background(), hb); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
}

// testManyInFlight posts far more operations than any in-flight limit from
// several goroutines, to disjoint ranges, and verifies all of them.
func testManyInFlight(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const ops, posters = 1200, 4
	jobs, total := manyJobs(ops, 16<<10)
	ha, la := Alloc(t, p.RegA, total, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, total, buffer.AccessReadWrite)
	Random(t, la)
	Random(t, lb)
	wantA, wantB := bytes.Clone(la), bytes.Clone(lb)
	for _, j := range jobs {
		if j.op == backend.OpWrite {
			copy(wantB[j.off:j.off+j.n], la[j.off:j.off+j.n])
		} else {
			copy(wantA[j.off:j.off+j.n], lb[j.off:j.off+j.n])
		}
	}
	rec := NewRecorder(ops)
	deadline := time.Now().Add(f.Timeout)
	for _, j := range jobs {
		j.wr, j.release = NewWR(t, p.RegA, j.op, Slice(t, ha, j.off, j.n), Slice(t, hb, j.off, j.n), deadline, rec)
		defer j.release()
	}
	if err := postAll(p.Route, jobs, posters); err != nil {
		t.Fatal(err)
	}
	seen := make(map[*backend.WorkRequest]bool, ops)
	for range ops {
		res := rec.Wait(t, f.Timeout+10*time.Second)
		if seen[res.WR] {
			t.Fatalf("work request completed twice")
		}
		seen[res.WR] = true
		if res.Err != nil {
			t.Fatalf("%s of %d bytes: %v", res.WR.Op, len(res.WR.Local), res.Err)
		}
	}
	AssertSame(t, "local after many gets", la, wantA)
	AssertSame(t, "remote after many puts", lb, wantB)
	if st := p.Route.Stats(); st.InFlight != 0 || st.Ops != ops {
		t.Errorf("stats after %d ops: %+v", ops, st)
	}
}

// manyJob is one operation of testManyInFlight.
type manyJob struct {
	op      backend.Op
	off, n  int
	wr      *backend.WorkRequest
	release func()
}

// manyJobs returns ops jobs of 1..maxLen bytes at disjoint offsets (a
// third of them gets, with a fixed seed) and the bytes they span.
func manyJobs(ops, maxLen int) ([]*manyJob, int) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	jobs := make([]*manyJob, ops)
	total := 0
	for i := range jobs {
		n := 1 + rng.IntN(maxLen)
		op := backend.OpWrite
		if i%3 == 0 {
			op = backend.OpRead
		}
		jobs[i] = &manyJob{op: op, off: total, n: n}
		total += n + rng.IntN(64)
	}
	return jobs, total
}

// postAll posts the jobs' work requests on rt from posters goroutines
// and returns the first error.
func postAll(rt backend.Route, jobs []*manyJob, posters int) error {
	var wg sync.WaitGroup
	errs := make(chan error, posters)
	for g := range posters {
		wg.Go(func() {
			for i := g; i < len(jobs); i += posters {
				if err := rt.Post(jobs[i].wr); err != nil {
					errs <- fmt.Errorf("post %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func testStats(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 10000
	ha, _ := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, _ := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	for range 3 {
		if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, ha, hb); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	for range 2 {
		if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, ha, hb); err != nil {
			t.Fatalf("get: %v", err)
		}
	}
	want := backend.RouteStats{Ops: 5, BytesPut: 3 * n, BytesGot: 2 * n}
	if st := p.Route.Stats(); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
}
