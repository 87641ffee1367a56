package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestPutGet moves sizes around the chunk boundary at several offsets over
// routes of 1 and 4 connections and verifies every byte both ways.
func TestPutGet(t *testing.T) {
	sizes := []int{1, 4 << 10, 1 << 20, 1<<20 + 1, 16 << 20}
	offsets := []int{0, 1, 4093}
	const slack = 8 << 10
	for _, conns := range []int{1, 4} {
		t.Run(fmt.Sprintf("conns=%d", conns), func(t *testing.T) {
			p := newPair(t, Config{ConnsPerRoute: conns}, Config{})
			hl, local := backendtest.Alloc(t, p.regA, 16<<20+slack, buffer.AccessReadWrite)
			_ = hl
			hr, remote := backendtest.Alloc(t, p.regB, 16<<20+slack, buffer.AccessReadWrite)
			var ops, put, got uint64
			for _, n := range sizes {
				for i, roff := range offsets {
					loff := offsets[(i+1)%len(offsets)] // local offset differs from the remote one
					name := fmt.Sprintf("size=%d/roff=%d/loff=%d", n, roff, loff)
					rbuf := backendtest.Slice(t, hr, roff, n)

					// Put: local -> remote.
					backendtest.Random(t, remote)
					before := bytes.Clone(remote)
					src := local[loff : loff+n]
					backendtest.Random(t, src)
					if err := do(t, p.route, backend.OpWrite, src, rbuf); err != nil {
						t.Fatalf("%s: put: %v", name, err)
					}
					backendtest.AssertSame(t, name+": put payload", remote[roff:roff+n], src)
					// Nothing outside the target range was touched.
					backendtest.AssertSame(t, name+": bytes before the put range", remote[:roff], before[:roff])
					backendtest.AssertSame(t, name+": bytes after the put range", remote[roff+n:], before[roff+n:])

					// Get: remote -> local.
					backendtest.Random(t, remote)
					backendtest.Random(t, local)
					lbefore := bytes.Clone(local)
					dst := local[loff : loff+n]
					if err := do(t, p.route, backend.OpRead, dst, rbuf); err != nil {
						t.Fatalf("%s: get: %v", name, err)
					}
					backendtest.AssertSame(t, name+": get payload", dst, remote[roff:roff+n])
					backendtest.AssertSame(t, name+": local bytes before the get range", local[:loff], lbefore[:loff])
					backendtest.AssertSame(t, name+": local bytes after the get range", local[loff+n:], lbefore[loff+n:])
					ops += 2
					put += uint64(n)
					got += uint64(n)
				}
			}
			st := p.route.Stats()
			want := backend.RouteStats{Ops: ops, BytesPut: put, BytesGot: got}
			if st != want {
				t.Fatalf("route stats %+v, want %+v", st, want)
			}
			// Served counts operations, as shm does, not the 1 MiB frames a
			// large one is split into (issue 23: 400 for 100 puts of 4 MiB).
			wantSv := backend.ServedStats{Ops: ops, BytesIn: put, BytesOut: got}
			sv := servedEventually(t, p.b, func(sv backend.ServedStats) bool { return sv == wantSv })
			if sv != wantSv {
				t.Fatalf("served stats %+v, want %+v", sv, wantSv)
			}
			if a := p.a.Served(); a != (backend.ServedStats{}) {
				t.Fatalf("initiator served %+v, want nothing", a)
			}
		})
	}
}

// TestConcurrentSmallOps keeps thousands of small ops in flight from several
// goroutines, more than MaxInFlight, and verifies every one.
func TestConcurrentSmallOps(t *testing.T) {
	const workers, perW, slot = 8, 250, 512 // 2000 ops in all
	for _, conns := range []int{1, 4} {
		t.Run(fmt.Sprintf("conns=%d", conns), func(t *testing.T) {
			p := newPair(t, Config{ConnsPerRoute: conns, MaxInFlight: 256}, Config{})
			_, local := backendtest.Alloc(t, p.regA, workers*perW*slot, buffer.AccessReadWrite)
			_, back := backendtest.Alloc(t, p.regA, workers*perW*slot, buffer.AccessReadWrite)
			hr, remote := backendtest.Alloc(t, p.regB, workers*perW*slot, buffer.AccessReadWrite)
			backendtest.Random(t, local)
			s := &smallOps{rt: p.route, remote: hr, workers: workers, perW: perW, slot: slot}
			var total uint64
			for range workers * perW {
				s.sizes = append(s.sizes, 1+rand.IntN(slot))
				total += uint64(s.sizes[len(s.sizes)-1])
			}
			if err := s.run(backend.OpWrite, local); err != nil {
				t.Fatalf("puts: %v", err)
			}
			s.check(t, "put", remote, local)
			if err := s.run(backend.OpRead, back); err != nil {
				t.Fatalf("gets: %v", err)
			}
			s.check(t, "get", back, local)
			st := p.route.Stats()
			want := backend.RouteStats{Ops: 2 * workers * perW, BytesPut: total, BytesGot: total}
			if st != want {
				t.Fatalf("route stats %+v, want %+v", st, want)
			}
			wantSv := backend.ServedStats{Ops: 2 * workers * perW, BytesIn: total, BytesOut: total}
			if sv := servedEventually(t, p.b, func(sv backend.ServedStats) bool { return sv == wantSv }); sv != wantSv {
				t.Fatalf("served stats %+v, want %+v", sv, wantSv)
			}
		})
	}
}

// smallOps is TestConcurrentSmallOps' load: op i moves sizes[i] bytes at
// i*slot, posted by worker i/perW.
type smallOps struct {
	rt                  backend.Route
	remote              buffer.Buffer
	workers, perW, slot int
	sizes               []int
}

// run posts every op of each worker from its own goroutine, then waits for
// all of them; it returns the first error.
func (s *smallOps) run(op backend.Op, buf []byte) error {
	var wg sync.WaitGroup
	errs := make(chan error, s.workers)
	for w := range s.workers {
		wg.Go(func() {
			if err := s.worker(w, op, buf); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (s *smallOps) worker(w int, op backend.Op, buf []byte) error {
	rec := backendtest.NewRecorder(s.perW)
	seen := make(map[*backend.WorkRequest]bool, s.perW)
	index := make(map[*backend.WorkRequest]int, s.perW)
	for j := range s.perW {
		i := w*s.perW + j
		off, n := uint64(i*s.slot), uint64(s.sizes[i])
		rb, err := s.remote.Slice(off, n)
		if err != nil {
			return err
		}
		wr := &backend.WorkRequest{Op: op, Local: buf[off : off+n], Remote: rb,
			Deadline: time.Now().Add(waitTimeout), Done: rec}
		index[wr] = i
		if err := s.rt.Post(wr); err != nil {
			return fmt.Errorf("post %d: %w", i, err)
		}
	}
	for range s.perW {
		select {
		case res := <-rec.Results():
			if res.Err != nil {
				return fmt.Errorf("op %d: %w", index[res.WR], res.Err)
			}
			if seen[res.WR] {
				return fmt.Errorf("op %d completed twice", index[res.WR])
			}
			seen[res.WR] = true
		case <-time.After(waitTimeout):
			return fmt.Errorf("worker %d: completions missing", w)
		}
	}
	return nil
}

// check compares every op's range of got with want.
func (s *smallOps) check(t *testing.T, what string, got, want []byte) {
	t.Helper()
	for i, n := range s.sizes {
		off := i * s.slot
		if !bytes.Equal(got[off:off+n], want[off:off+n]) {
			t.Fatalf("%s %d of %d bytes: differs at %d", what, i, n, backendtest.FirstDiff(got[off:off+n], want[off:off+n]))
		}
	}
}

// TestMixedPutGetInFlight interleaves puts and gets of different sizes on
// disjoint ranges, all in flight at once, striped over 4 connections.
func TestMixedPutGetInFlight(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 4, ChunkSize: 64 << 10}, Config{})
	const n = 64
	const slot = 300 << 10 // five chunks, the last partial
	_, local := backendtest.Alloc(t, p.regA, n*slot, buffer.AccessReadWrite)
	hr, remote := backendtest.Alloc(t, p.regB, n*slot, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	backendtest.Random(t, remote)
	wantLocal, wantRemote := bytes.Clone(local), bytes.Clone(remote)
	rec := backendtest.NewRecorder(n)
	for i := range n {
		off := i * slot
		op := backend.OpWrite
		if i%2 == 1 {
			op = backend.OpRead
		}
		wr := &backend.WorkRequest{Op: op, Local: local[off : off+slot], Remote: backendtest.Slice(t, hr, off, slot),
			Deadline: time.Now().Add(waitTimeout), Done: rec}
		if op == backend.OpWrite {
			copy(wantRemote[off:off+slot], wantLocal[off:off+slot])
		} else {
			copy(wantLocal[off:off+slot], wantRemote[off:off+slot])
		}
		if err := p.route.Post(wr); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	for range n {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("%v: %v", res.WR.Op, res.Err)
		}
	}
	backendtest.AssertSame(t, "local memory", local, wantLocal)
	backendtest.AssertSame(t, "remote memory", remote, wantRemote)
	if st := p.route.Stats(); st.Ops != n || st.InFlight != 0 || st.Errors != 0 {
		t.Fatalf("route stats %+v", st)
	}
}

func TestPostErrors(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 1, ChunkSize: 4096, MaxInFlight: 4, MaxFrameLen: 64 << 10}, Config{})
	hr, remote := backendtest.Alloc(t, p.regB, 1<<20, buffer.AccessReadWrite)
	_, local := backendtest.Alloc(t, p.regA, 1<<20, buffer.AccessReadWrite)
	backendtest.Random(t, remote)
	before := bytes.Clone(remote)
	rec := backendtest.NewRecorder(1)
	post := func(op backend.Op, local []byte, remote buffer.Buffer) error {
		return p.route.Post(&backend.WorkRequest{Op: op, Local: local, Remote: remote, Deadline: time.Now().Add(waitTimeout), Done: rec})
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"local shorter than remote", post(backend.OpWrite, local[:100], backendtest.Slice(t, hr, 0, 101)), rdmamgr.ErrProtocol},
		{"local longer than remote", post(backend.OpRead, local[:101], backendtest.Slice(t, hr, 0, 100)), rdmamgr.ErrProtocol},
		{"zero length", post(backend.OpWrite, local[:0], backendtest.Slice(t, hr, 0, 0)), rdmamgr.ErrProtocol},
		{"nil local", post(backend.OpRead, nil, backendtest.Slice(t, hr, 0, 0)), rdmamgr.ErrProtocol},
		{"unknown op", post(backend.Op(99), local[:10], backendtest.Slice(t, hr, 0, 10)), rdmamgr.ErrProtocol},
		{"send over the frame limit", post(backend.OpSend, local[:1<<20], buffer.Buffer{}), rdmamgr.ErrLimit},
		{"send of nothing", post(backend.OpSend, nil, buffer.Buffer{}), rdmamgr.ErrProtocol},
		{"atomic at an odd offset", post(backend.OpFetchAdd, nil, backendtest.Slice(t, hr, 4, 8)), rdmamgr.ErrMisaligned},
		{"atomic on 16 bytes", post(backend.OpCompareSwap, nil, backendtest.Slice(t, hr, 0, 16)), rdmamgr.ErrMisaligned},
		{"atomic with local memory", post(backend.OpFetchAdd, local[:8], backendtest.Slice(t, hr, 0, 8)), rdmamgr.ErrMisaligned},
		{"op zero", post(backend.Op(0), local[:10], backendtest.Slice(t, hr, 0, 10)), rdmamgr.ErrProtocol},
		// 5 chunks of 4 KiB can never be in flight on a route of 4.
		{"more chunks than MaxInFlight", post(backend.OpWrite, local[:5*4096], backendtest.Slice(t, hr, 0, 5*4096)), rdmamgr.ErrLimit},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: Post = %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	rec.None(t)
	backendtest.AssertSame(t, "remote after refused posts", remote, before)
	if st := p.route.Stats(); st != (backend.RouteStats{}) {
		t.Fatalf("stats after refused posts: %+v", st)
	}
	// The route is still fine, and exactly 4 chunks fit.
	if err := do(t, p.route, backend.OpWrite, local[:4*4096], backendtest.Slice(t, hr, 0, 4*4096)); err != nil {
		t.Fatalf("put of MaxInFlight chunks: %v", err)
	}
	backendtest.AssertSame(t, "remote", remote[:4*4096], local[:4*4096])

	// After Close, Post fails with ErrClosed and Done is not called.
	if err := p.route.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-p.route.Done():
	default:
		t.Fatalf("Done not closed after Close")
	}
	if err := p.route.Err(); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("Err after Close: %v, want ErrClosed", err)
	}
	if err := post(backend.OpWrite, local[:10], backendtest.Slice(t, hr, 0, 10)); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("Post after Close: %v, want ErrClosed", err)
	}
	rec.None(t)
}

// TestBackPressure: with MaxInFlight chunks outstanding, Post waits; when it
// cannot get room before the request's deadline it fails with ErrDeadline
// and the request is not completed.
func TestBackPressure(t *testing.T) {
	f := newFakeServer(t)
	a, _ := newBackend(t, Config{ConnsPerRoute: 1, MaxInFlight: 2}, backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	rec := backendtest.NewRecorder(4)
	_, local := backendtest.Alloc(t, a.reg, 4096, buffer.AccessReadWrite)
	remote := fakeRemote(4096)
	for range 2 {
		wr := &backend.WorkRequest{Op: backend.OpRead, Local: local[:16], Remote: backendtest.Slice(t, remote, 0, 16), Deadline: time.Now().Add(waitTimeout), Done: rec}
		if err := rt.Post(wr); err != nil {
			t.Fatalf("post: %v", err)
		}
	}
	// The third waits for room and gives up at its deadline.
	third := &backend.WorkRequest{Op: backend.OpRead, Local: local[:16], Remote: backendtest.Slice(t, remote, 0, 16), Deadline: time.Now().Add(50 * time.Millisecond), Done: rec}
	if err := rt.Post(third); !errors.Is(err, rdmamgr.ErrDeadline) {
		t.Fatalf("post at the in-flight limit: %v, want ErrDeadline", err)
	}
	rec.None(t)
	// Answering the first two frees room.
	for range 2 {
		h := sc.readReq(t)
		sc.respond(t, respHeader{op: h.op, length: h.length, wrid: h.wrid}, make([]byte, h.length))
	}
	for range 2 {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("completion: %v", res.Err)
		}
	}
	if st := rt.Stats(); st.InFlight != 0 || st.Ops != 2 {
		t.Fatalf("stats %+v", st)
	}
}
