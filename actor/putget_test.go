package actor

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

func TestPutGetLocal(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	const n = 3<<20 + 17
	local := requestBuf(t, ctx, a.Client(), n, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), n, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	if qp.PeerID() != b.ID() {
		t.Fatalf("queue pair peer %x, want %x", qp.PeerID(), b.ID())
	}
	src := mustBytes(t, a, local)
	crand.Read(src)
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	dst := mustBytes(t, b, remote)
	if !bytes.Equal(src, dst) {
		t.Fatal("put: bytes differ")
	}
	crand.Read(dst)
	if err := qp.Get(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("get: bytes differ")
	}
	// Refused by the peer: wrong key.
	bad := remote
	bad.Key[0] ^= 1
	if err := qp.Put(local, bad).Wait(ctx); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("bad key: %v", err)
	}
	// Refused locally: not the peer's buffer.
	if err := qp.Put(local, local).Wait(ctx); !errors.Is(err, rdmamgr.ErrWrongPeer) {
		t.Fatalf("wrong peer: %v", err)
	}
	st, err := b.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ServedBytesIn != n || st.ServedBytesOut != n || st.RejectedOps == 0 || st.ManagerId != b.ID() || st.Backend != "tcp" {
		t.Fatalf("status %v", st)
	}
	rs := routes(t, ctx, a)
	if len(rs) != 1 || rs[0].State != "up" || rs[0].PeerId != b.ID() || rs[0].BytesPut != n || rs[0].BytesGot != n || rs[0].Errors != 1 {
		t.Fatalf("routes %v", rs)
	}
	if id, err := NewClient(sys, a.PID()).Ping(ctx); err != nil || id != a.ID() {
		t.Fatalf("ping: %x %v", id, err)
	}
}

func TestRequestBuffer(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	type made struct {
		buf  buffer.Buffer
		size uint64
	}
	var all []made
	var total uint64
	clients := []*Client{a.Client(), NewClient(sys, a.PID())}
	for i, size := range []uint64{1, 100, 4095, 4096, 4097, 1<<20 + 3} {
		for j, access := range []buffer.Access{0, buffer.AccessRead, buffer.AccessWrite, buffer.AccessReadWrite} {
			buf := requestBuf(t, ctx, clients[(i+j)%2], size, access)
			if buf.Length != size || buf.Offset != 0 || buf.Access != access || buf.OwnerID != a.ID() ||
				buf.OwnerAddr != sys.Address() || buf.Region == 0 || buf.Key == (buffer.Key{}) {
				t.Fatalf("buffer of %d bytes %s: %v", size, access, buf)
			}
			mem := mustBytes(t, a, buf)
			if uint64(len(mem)) != size || !bytes.Equal(mem, make([]byte, size)) {
				t.Fatalf("memory of %d bytes: len %d or not zeroed", size, len(mem))
			}
			for _, o := range all {
				if o.buf.Region == buf.Region || o.buf.Key == buf.Key {
					t.Fatalf("region or key reused: %v %v", o.buf, buf)
				}
			}
			all = append(all, made{buf, size})
			total += size
		}
	}
	st, err := a.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.RegisteredBytes != total || len(st.Buffers) != len(all) {
		t.Fatalf("status: %d bytes in %d buffers, want %d in %d", st.RegisteredBytes, len(st.Buffers), total, len(all))
	}
	byRegion := map[uint64]*rdmapb.BufferStatus{}
	for _, bs := range st.Buffers {
		byRegion[bs.Region] = bs
	}
	for _, o := range all {
		bs := byRegion[o.buf.Region]
		if bs == nil || bs.Length != o.size || buffer.Access(bs.Access) != o.buf.Access || bs.UserMemory {
			t.Fatalf("status of %v: %v", o.buf, bs)
		}
	}
	// b saw none of it.
	if st, _ := b.Client().Status(ctx); st.RegisteredBytes != 0 || len(st.Buffers) != 0 {
		t.Fatalf("peer status %v", st)
	}
	for _, o := range all {
		if err := clients[int(o.buf.Region)%2].ReleaseBuffer(ctx, o.buf); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := a.Client().Status(ctx); st.RegisteredBytes != 0 || len(st.Buffers) != 0 {
		t.Fatalf("status after release %v", st)
	}
}

// Random data at random offsets, through slices, both directions: each
// transfer changes exactly the destination range.
func TestPutGetRandomOffsets(t *testing.T) {
	sys := newSystem(t)
	// Small chunks on the initiator: transfers are split and striped.
	a := startManagerTCP(t, sys, Config{Name: "a"}, tcp.Config{ChunkSize: 64 << 10, ConnsPerRoute: 3})
	b := startManager(t, sys, Config{Name: "b"})
	ctx := testCtx(t)
	const ln, rn = 1 << 20, 1<<20 + 12345
	s := &shadowed{ln: ln, rn: rn}
	s.local = requestBuf(t, ctx, a.Client(), ln, buffer.AccessReadWrite)
	s.remote = requestBuf(t, ctx, NewClient(sys, b.PID()), rn, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	s.lmem, s.rmem = mustBytes(t, a, s.local), mustBytes(t, b, s.remote)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	s.rng = rand.New(rand.NewPCG(seed, 42))
	s.fill(s.lmem)
	s.fill(s.rmem)
	s.lshadow, s.rshadow = bytes.Clone(s.lmem), bytes.Clone(s.rmem)
	for i := range 40 {
		s.randomOp(t, ctx, qp, i)
	}

	// A batch of disjoint slices.
	var ops []queuepair.Op
	for k := range uint64(8) {
		ls, _ := s.local.Slice(k*(ln/8), ln/8)
		rs, _ := s.remote.Slice(rn-(k+1)*(ln/8), ln/8)
		ops = append(ops, queuepair.PutOp(ls, rs))
		copy(s.rshadow[rn-(k+1)*(ln/8):], s.lmem[k*(ln/8):(k+1)*(ln/8)])
	}
	if err := qp.Submit(ctx, ops...).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	s.check(t, "batch")

	// Slices past the end are refused before anything moves.
	if _, err := s.remote.Slice(rn-10, 11); !errors.Is(err, rdmamgr.ErrOutOfRange) {
		t.Fatalf("slice past end: %v", err)
	}
	forged := s.remote
	forged.Offset, forged.Length = rn-10, 20
	ls, _ := s.local.Slice(0, 20)
	if err := qp.Put(ls, forged).Wait(ctx); !errors.Is(err, rdmamgr.ErrOutOfRange) {
		t.Fatalf("put past the remote end: %v", err)
	}
	s.check(t, "refused put")
}

// shadowed is a local and a remote buffer with copies of what their memory
// must hold.
type shadowed struct {
	local, remote    buffer.Buffer
	ln, rn           uint64
	lmem, rmem       []byte
	lshadow, rshadow []byte
	rng              *rand.Rand
}

func (s *shadowed) fill(p []byte) {
	for i := range p {
		p[i] = byte(s.rng.Uint32())
	}
}

func (s *shadowed) check(t *testing.T, what string) {
	t.Helper()
	if !bytes.Equal(s.lmem, s.lshadow) || !bytes.Equal(s.rmem, s.rshadow) {
		t.Fatalf("%s: memory differs from expected", what)
	}
}

// randomOp puts (even i) or gets (odd i) a random slice at random offsets,
// tiny every tenth time, and checks both memories.
func (s *shadowed) randomOp(t *testing.T, ctx context.Context, qp *queuepair.QueuePair, i int) {
	t.Helper()
	n := 1 + s.rng.Uint64N(200<<10)
	if i%10 == 0 {
		n = 1 + s.rng.Uint64N(3) // tiny transfers too
	}
	lo, ro := s.rng.Uint64N(s.ln-n+1), s.rng.Uint64N(s.rn-n+1)
	ls, err := s.local.Slice(lo, n)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.remote.Slice(ro, n)
	if err != nil {
		t.Fatal(err)
	}
	put := i%2 == 0
	if put {
		s.fill(s.lmem[lo : lo+n])
		copy(s.lshadow[lo:lo+n], s.lmem[lo:lo+n])
		copy(s.rshadow[ro:ro+n], s.lmem[lo:lo+n])
		err = qp.Put(ls, rs).Wait(ctx)
	} else {
		s.fill(s.rmem[ro : ro+n])
		copy(s.rshadow[ro:ro+n], s.rmem[ro:ro+n])
		copy(s.lshadow[lo:lo+n], s.rmem[ro:ro+n])
		err = qp.Get(ls, rs).Wait(ctx)
	}
	if err != nil {
		t.Fatalf("op %d (put %v) of %d bytes local@%d remote@%d: %v", i, put, n, lo, ro, err)
	}
	s.check(t, fmt.Sprintf("op %d (put %v) of %d bytes local@%d remote@%d", i, put, n, lo, ro))
}

func TestReleaseBufferThenOps(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	bc := NewClient(sys, b.PID()) // b's client, as a process without b would use
	local := requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	r1 := requestBuf(t, ctx, bc, 4096, buffer.AccessReadWrite)
	r2 := requestBuf(t, ctx, bc, 4096, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	lmem := mustBytes(t, a, local)
	crand.Read(lmem)
	if err := qp.Put(local, r1).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := qp.Put(local, r2).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(lmem)
	r2mem := mustBytes(t, b, r2)

	if err := bc.ReleaseBuffer(ctx, r1); err != nil {
		t.Fatal(err)
	}
	crand.Read(lmem)
	lwant := bytes.Clone(lmem)
	if err := qp.Get(local, r1).Wait(ctx); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("get from released buffer: %v", err)
	}
	var re *backend.RemoteError
	if err := qp.Put(local, r1).Wait(ctx); !errors.Is(err, rdmamgr.ErrReleased) || !errors.As(err, &re) {
		t.Fatalf("put to released buffer: %v", err)
	}
	if !bytes.Equal(lmem, lwant) {
		t.Fatal("failed get changed local memory")
	}
	if !bytes.Equal(r2mem, want) {
		t.Fatal("other buffer of the peer changed")
	}
	if _, err := b.Bytes(r1); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("owner's bytes of released buffer: %v", err)
	}
	if err := bc.ReleaseBuffer(ctx, r1); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("second release: %v", err)
	}
	// The other buffer still works both ways.
	if err := qp.Get(local, r2).Wait(ctx); err != nil || !bytes.Equal(lmem, want) {
		t.Fatalf("get from other buffer: %v", err)
	}
	st, _ := b.Client().Status(ctx)
	if len(st.Buffers) != 1 || st.Buffers[0].Region != r2.Region || st.RegisteredBytes != 4096 {
		t.Fatalf("status %v", st)
	}
}

// Release lets work already posted finish normally, even when it drops the
// last reference to the route.
func TestReleaseQueuePairWithWorkInFlight(t *testing.T) {
	sys, a, b := newPairNoLinger(t)
	ctx := testCtx(t)
	const n = 32 << 20
	local := requestBuf(t, ctx, a.Client(), n, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), n, buffer.AccessReadWrite)
	lmem := mustBytes(t, a, local)
	crand.Read(lmem)
	qp, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	w := qp.Put(local, remote)
	qp.Release()
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("put posted before release: %v", err)
	}
	if !bytes.Equal(mustBytes(t, b, remote), lmem) {
		t.Fatal("bytes differ")
	}
	if err := qp.Put(local, remote).Err(); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("put after release: %v", err)
	}
	if rs := routes(t, ctx, a); len(rs) != 0 {
		t.Fatalf("routes after release %v", rs)
	}
}
