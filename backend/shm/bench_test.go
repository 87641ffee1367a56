//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// noteDone is a Completer that only records the outcome.
type noteDone struct{ err error }

func (d *noteDone) Complete(_ *backend.WorkRequest, err error) { d.err = err }

// BenchmarkPost measures the backend's own cost of an inline Put or Get
// on a mapped region (no queue pair, no manager): go test -run '^$'
// -bench Post ./backend/shm.
func BenchmarkPost(b *testing.B) {
	for _, n := range []int{8, 4096, 65536} {
		for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
			b.Run(fmt.Sprintf("%s/%d", op, n), func(b *testing.B) {
				a, regA := newBackend(b, backendtest.OwnerA, shm.Config{})
				backendtest.CloseAtCleanup(b, timeout, a, regA)
				o, regB := newBackend(b, backendtest.OwnerB, shm.Config{})
				backendtest.CloseAtCleanup(b, timeout, o, regB)
				rt := backendtest.MustConnect(b, timeout, a, o, backendtest.OwnerB, backendtest.OwnerA)
				ha, _ := backendtest.Alloc(b, regA, n, buffer.AccessReadWrite)
				hb, _ := backendtest.Alloc(b, regB, n, buffer.AccessReadWrite)
				done := &noteDone{}
				wr, release := backendtest.NewWR(b, regA, op, ha, hb, time.Now().Add(time.Hour), done)
				defer release()
				if err := backendtest.DoWR(b, timeout, rt, wr); err != nil { // maps the region
					b.Fatal(err)
				}
				wr.Done = done
				b.SetBytes(int64(n))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := rt.Post(wr); err != nil || done.err != nil {
						b.Fatal(err, done.err)
					}
				}
			})
		}
	}
}

// BenchmarkMapRevoke measures a region's life as a peer sees it: the
// owner allocates it, the peer's first Put maps it, the owner revokes and
// releases it (go test -run '^$' -bench MapRevoke ./backend/shm). Its
// parts are timed apart: map (the first Put), revoke and release.
func BenchmarkMapRevoke(b *testing.B) {
	for _, n := range []int{64, 4096, 65536, 1 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			a, regA := newBackend(b, backendtest.OwnerA, shm.Config{})
			backendtest.CloseAtCleanup(b, timeout, a, regA)
			o, regB := newBackend(b, backendtest.OwnerB, shm.Config{})
			backendtest.CloseAtCleanup(b, timeout, o, regB)
			rt := backendtest.MustConnect(b, timeout, a, o, backendtest.OwnerB, backendtest.OwnerA)
			ha, _ := backendtest.Alloc(b, regA, n, buffer.AccessReadWrite)
			var mapT, revT, relT time.Duration
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				hb, err := regB.Allocate(uint64(n), buffer.AccessReadWrite)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if err := backendtest.Do(b, timeout, rt, regA, backend.OpWrite, ha, hb); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := regB.Revoke(ctx, hb); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if err := regB.Release(ctx, hb); err != nil {
					b.Fatal(err)
				}
				mapT, revT, relT = mapT+t1.Sub(t0), revT+t2.Sub(t1), relT+time.Since(t2)
			}
			b.ReportMetric(float64(mapT.Nanoseconds())/float64(b.N), "map-ns/op")
			b.ReportMetric(float64(revT.Nanoseconds())/float64(b.N), "revoke-ns/op")
			b.ReportMetric(float64(relT.Nanoseconds())/float64(b.N), "release-ns/op")
		})
	}
}

// BenchmarkPostList is BenchmarkPost's small copies posted 16 at a time
// with backend.ListPoster (one state-table enter and leave per chain);
// ns/op is per operation: go test -run '^$' -bench PostList ./backend/shm.
func BenchmarkPostList(b *testing.B) {
	const chain = 16
	for _, n := range []int{8, 4096} {
		for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
			b.Run(fmt.Sprintf("%s/%d", op, n), func(b *testing.B) {
				a, regA := newBackend(b, backendtest.OwnerA, shm.Config{})
				backendtest.CloseAtCleanup(b, timeout, a, regA)
				o, regB := newBackend(b, backendtest.OwnerB, shm.Config{})
				backendtest.CloseAtCleanup(b, timeout, o, regB)
				rt := backendtest.MustConnect(b, timeout, a, o, backendtest.OwnerB, backendtest.OwnerA)
				lp, ok := rt.(backend.ListPoster)
				if !ok {
					b.Fatal("shm route is not a backend.ListPoster")
				}
				ha, _ := backendtest.Alloc(b, regA, n*chain, buffer.AccessReadWrite)
				hb, _ := backendtest.Alloc(b, regB, n*chain, buffer.AccessReadWrite)
				if err := backendtest.Do(b, timeout, rt, regA, backend.OpWrite, ha, hb); err != nil { // maps the region
					b.Fatal(err)
				}
				done := &noteDone{}
				wrs := make([]*backend.WorkRequest, chain)
				for i := range wrs {
					wr, release := backendtest.NewWR(b, regA, op, backendtest.Slice(b, ha, i*n, n), backendtest.Slice(b, hb, i*n, n), time.Now().Add(time.Hour), done)
					defer release()
					wrs[i] = wr
				}
				b.SetBytes(int64(n))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i += chain {
					if k, err := lp.PostList(wrs[:min(chain, b.N-i)]); err != nil || done.err != nil {
						b.Fatal(k, err, done.err)
					}
				}
			})
		}
	}
}
