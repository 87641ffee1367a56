package actor

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
	"google.golang.org/protobuf/proto"
)

// testTimeout bounds every wait of a test; nothing here asserts durations.
const testTimeout = 20 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newSystem returns a local actor system (no protoactor remote), shut down
// after every manager of the test is closed.
func newSystem(t *testing.T) *protoactor.ActorSystem {
	t.Helper()
	sys := NewActorSystem(nil)
	t.Cleanup(sys.Shutdown)
	return sys
}

// startManager starts a manager on sys over the TCP backend and closes it at
// the end of the test.
func startManager(t *testing.T, sys *protoactor.ActorSystem, cfg Config) *Manager {
	t.Helper()
	m, err := New(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close manager %s: %v", cfg.Name, err)
		}
	})
	return m
}

func newPair(t *testing.T) (*protoactor.ActorSystem, *Manager, *Manager) {
	t.Helper()
	sys := newSystem(t)
	return sys, startManager(t, sys, Config{Name: "a"}), startManager(t, sys, Config{Name: "b"})
}

// ask sends a raw message to pid and returns the reply.
func ask(t *testing.T, sys *protoactor.ActorSystem, pid *protoactor.PID, msg any) any {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, msg, testTimeout).Result()
	if err != nil {
		t.Fatalf("request %T: %v", msg, err)
	}
	return res
}

func mustBytes(t *testing.T, m *Manager, b buffer.Buffer) []byte {
	t.Helper()
	p, err := m.Bytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func requestQP(t *testing.T, ctx context.Context, m *Manager, peer *protoactor.PID) *queuepair.QueuePair {
	t.Helper()
	qp, err := m.Client().RequestQueuePair(ctx, peer)
	if err != nil {
		t.Fatalf("request queue pair to %s: %v", peer, err)
	}
	t.Cleanup(qp.Release)
	return qp
}

func requestBuf(t *testing.T, ctx context.Context, c *Client, n uint64, a buffer.Access) buffer.Buffer {
	t.Helper()
	b, err := c.RequestBuffer(ctx, n, a)
	if err != nil {
		t.Fatalf("request %d-byte buffer: %v", n, err)
	}
	return b
}

func routes(t *testing.T, ctx context.Context, m *Manager) []*rdmapb.RouteStatus {
	t.Helper()
	st, err := m.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.Routes
}

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
	if err := qp.Put(local, bad).Wait(ctx); !errors.Is(err, buffer.ErrBadKey) {
		t.Fatalf("bad key: %v", err)
	}
	// Refused locally: not the peer's buffer.
	if err := qp.Put(local, local).Wait(ctx); !errors.Is(err, queuepair.ErrWrongPeer) {
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
	a := startManager(t, sys, Config{Name: "a", TCP: tcp.Config{ChunkSize: 64 << 10, ConnsPerRoute: 3}})
	b := startManager(t, sys, Config{Name: "b"})
	ctx := testCtx(t)
	const ln, rn = 1 << 20, 1<<20 + 12345
	local := requestBuf(t, ctx, a.Client(), ln, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), rn, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	lmem, rmem := mustBytes(t, a, local), mustBytes(t, b, remote)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	fill := func(p []byte) {
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
	}
	fill(lmem)
	fill(rmem)
	lshadow, rshadow := bytes.Clone(lmem), bytes.Clone(rmem)

	for i := range 40 {
		n := 1 + rng.Uint64N(200<<10)
		if i%10 == 0 {
			n = 1 + rng.Uint64N(3) // tiny transfers too
		}
		lo, ro := rng.Uint64N(ln-n+1), rng.Uint64N(rn-n+1)
		ls, err := local.Slice(lo, n)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := remote.Slice(ro, n)
		if err != nil {
			t.Fatal(err)
		}
		put := i%2 == 0
		if put {
			fill(lmem[lo : lo+n])
			copy(lshadow[lo:lo+n], lmem[lo:lo+n])
			copy(rshadow[ro:ro+n], lmem[lo:lo+n])
			err = qp.Put(ls, rs).Wait(ctx)
		} else {
			fill(rmem[ro : ro+n])
			copy(rshadow[ro:ro+n], rmem[ro:ro+n])
			copy(lshadow[lo:lo+n], rmem[ro:ro+n])
			err = qp.Get(ls, rs).Wait(ctx)
		}
		if err != nil {
			t.Fatalf("op %d (put %v) of %d bytes local@%d remote@%d: %v", i, put, n, lo, ro, err)
		}
		if !bytes.Equal(lmem, lshadow) || !bytes.Equal(rmem, rshadow) {
			t.Fatalf("op %d (put %v) of %d bytes local@%d remote@%d: memory differs from expected", i, put, n, lo, ro)
		}
	}

	// A batch of disjoint slices.
	var ops []queuepair.Op
	for k := range uint64(8) {
		ls, _ := local.Slice(k*(ln/8), ln/8)
		rs, _ := remote.Slice(rn-(k+1)*(ln/8), ln/8)
		ops = append(ops, queuepair.PutOp(ls, rs))
		copy(rshadow[rn-(k+1)*(ln/8):], lmem[k*(ln/8):(k+1)*(ln/8)])
	}
	if err := qp.Submit(ctx, ops...).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rmem, rshadow) || !bytes.Equal(lmem, lshadow) {
		t.Fatal("batch: memory differs from expected")
	}

	// Slices past the end are refused before anything moves.
	if _, err := remote.Slice(rn-10, 11); !errors.Is(err, buffer.ErrOutOfRange) {
		t.Fatalf("slice past end: %v", err)
	}
	forged := remote
	forged.Offset, forged.Length = rn-10, 20
	ls, _ := local.Slice(0, 20)
	if err := qp.Put(ls, forged).Wait(ctx); !errors.Is(err, buffer.ErrOutOfRange) {
		t.Fatalf("put past the remote end: %v", err)
	}
	if !bytes.Equal(rmem, rshadow) || !bytes.Equal(lmem, lshadow) {
		t.Fatal("refused put changed memory")
	}
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
	if err := qp.Get(local, r1).Wait(ctx); !errors.Is(err, buffer.ErrReleased) {
		t.Fatalf("get from released buffer: %v", err)
	}
	var re *backend.RemoteError
	if err := qp.Put(local, r1).Wait(ctx); !errors.Is(err, buffer.ErrReleased) || !errors.As(err, &re) {
		t.Fatalf("put to released buffer: %v", err)
	}
	if !bytes.Equal(lmem, lwant) {
		t.Fatal("failed get changed local memory")
	}
	if !bytes.Equal(r2mem, want) {
		t.Fatal("other buffer of the peer changed")
	}
	if _, err := b.Bytes(r1); !errors.Is(err, buffer.ErrReleased) {
		t.Fatalf("owner's bytes of released buffer: %v", err)
	}
	if err := bc.ReleaseBuffer(ctx, r1); !errors.Is(err, buffer.ErrReleased) {
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
	sys, a, b := newPair(t)
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
	if err := a.Client().ReleaseQueuePair(ctx, qp); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("put posted before release: %v", err)
	}
	if !bytes.Equal(mustBytes(t, b, remote), lmem) {
		t.Fatal("bytes differ")
	}
	if err := qp.Put(local, remote).Err(); !errors.Is(err, queuepair.ErrReleased) {
		t.Fatalf("put after release: %v", err)
	}
	if rs := routes(t, ctx, a); len(rs) != 0 {
		t.Fatalf("routes after release %v", rs)
	}
}

func TestRequestQueuePairConcurrent(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	const n = 20
	qps := make([]*queuepair.QueuePair, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			qps[i], errs[i] = a.Client().RequestQueuePair(ctx, b.PID())
		}()
	}
	close(start)
	wg.Wait()
	ids := map[uint64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if ids[qps[i].ID()] {
			t.Fatalf("queue pair id %d twice", qps[i].ID())
		}
		ids[qps[i].ID()] = true
		if qps[i].Route() != qps[0].Route() || qps[i].PeerID() != b.ID() {
			t.Fatalf("queue pair %d on another route or peer", i)
		}
	}
	rs := routes(t, ctx, a)
	if len(rs) != 1 || rs[0].Refs != n || rs[0].State != "up" || rs[0].PeerId != b.ID() || rs[0].PeerAddr != peerKey(b.PID()) {
		t.Fatalf("routes %v", rs)
	}
	// Every queue pair works.
	local := requestBuf(t, ctx, a.Client(), 1000, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), 1000*n, buffer.AccessReadWrite)
	for i, qp := range qps {
		rs, _ := remote.Slice(uint64(i)*1000, 1000)
		if err := qp.Put(local, rs).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}

	old := qps[0].Route()
	for i, qp := range qps {
		wg.Add(1)
		go func() { defer wg.Done(); qp.Release() }()
		if i == n/2 {
			qp.Release() // twice: idempotent
		}
	}
	wg.Wait()
	if rs := routes(t, ctx, a); len(rs) != 0 {
		t.Fatalf("routes after releasing all: %v", rs)
	}
	select {
	case <-old.Done():
	default:
		t.Fatal("route still up after its last queue pair was released")
	}
	if err := qps[3].Put(local, remote).Err(); !errors.Is(err, queuepair.ErrReleased) {
		t.Fatalf("released queue pair: %v", err)
	}

	qp := requestQP(t, ctx, a, b.PID())
	if qp.Route() == old || routeDead(qp.Route().(backend.Route)) {
		t.Fatal("new request did not build a new route")
	}
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].Refs != 1 || rs[0].State != "up" {
		t.Fatalf("routes %v", rs)
	}
	rs0, _ := remote.Slice(0, 1000)
	if err := qp.Get(local, rs0).Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A queue pair to the manager itself works (loopback route).
func TestQueuePairToSelf(t *testing.T) {
	_, a, _ := newPair(t)
	ctx := testCtx(t)
	x := requestBuf(t, ctx, a.Client(), 5000, buffer.AccessReadWrite)
	y := requestBuf(t, ctx, a.Client(), 5000, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, a.PID())
	crand.Read(mustBytes(t, a, x))
	if err := qp.Put(x, y).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustBytes(t, a, x), mustBytes(t, a, y)) {
		t.Fatal("bytes differ")
	}
}

func TestRequestQueuePairUnknownPeer(t *testing.T) {
	sys, a, b := newPair(t)
	// Actors that are not managers able to take a route: one answers the
	// handshake with the wrong type, one as a closing manager does.
	spawn := func(name string, reply proto.Message) *protoactor.PID {
		pid, err := sys.Root.SpawnNamed(protoactor.PropsFromFunc(func(c protoactor.Context) {
			if _, ok := c.Message().(*rdmapb.RouteHandshake); ok {
				c.Respond(reply)
			}
		}), name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
		return pid
	}
	liar := spawn("liar", &rdmapb.Pong{})
	closing := spawn("closing", &rdmapb.ErrorReply{Error: &rdmapb.Error{Code: rdmapb.Code_CLOSED, Message: "closing"}})

	for _, peer := range []*protoactor.PID{
		protoactor.NewPID(sys.Address(), "nobody"),
		protoactor.NewPID("192.0.2.1:4242", DefaultName), // no remote: unreachable address
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		qp, err := a.Client().RequestQueuePair(ctx, peer)
		cerr := ctx.Err()
		cancel()
		if !errors.Is(err, ErrUnknownPeer) || errors.Is(err, context.DeadlineExceeded) || qp != nil {
			t.Fatalf("queue pair to %s: %v %v", peer, qp, err)
		}
		if cerr != nil {
			t.Fatalf("queue pair to %s: answered only after the ctx ended: %v", peer, err)
		}
		t.Logf("%s: %v", peer, err)
	}
	ctx := testCtx(t)
	if _, err := a.Client().RequestQueuePair(ctx, liar); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("queue pair to a non-manager: %v", err)
	}
	// The peer's CLOSED must not read as our manager being closed.
	if _, err := a.Client().RequestQueuePair(ctx, closing); !errors.Is(err, ErrUnknownPeer) || errors.Is(err, ErrClosed) {
		t.Fatalf("queue pair to a closing manager: %v", err)
	}
	// Failed setups leave no route behind, and a real peer still works.
	if rs := routes(t, ctx, a); len(rs) != 0 {
		t.Fatalf("routes %v", rs)
	}
	requestQP(t, ctx, a, b.PID())
}

func TestUnknownMessage(t *testing.T) {
	sys, a, _ := newPair(t)
	ctx := testCtx(t)
	for _, msg := range []any{&rdmapb.Pong{}, &rdmapb.RouteHandshakeResponse{}, &rdmapb.Error{}, "hello", 42} {
		res := ask(t, sys, a.PID(), msg)
		er, ok := res.(*rdmapb.ErrorReply)
		if !ok || er.Error.GetCode() != rdmapb.Code_UNKNOWN_MESSAGE {
			t.Fatalf("%T: reply %T %v", msg, res, res)
		}
		if err := toError(er.Error); !errors.Is(err, ErrUnknownMessage) {
			t.Fatalf("%T: %v", msg, err)
		}
	}
	// Without a sender: nothing to answer, nothing breaks.
	sys.Root.Send(a.PID(), &rdmapb.Pong{})
	sys.Root.Send(a.PID(), "hello")
	if id, err := a.Client().Ping(ctx); err != nil || id != a.ID() {
		t.Fatalf("ping after unknown messages: %x %v", id, err)
	}
	// The typed client reports a reply of the wrong type.
	if _, err := request[*rdmapb.Pong](ctx, a.Client(), &rdmapb.Pong{}); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("client: %v", err)
	}
	if _, err := request[*rdmapb.Pong](ctx, a.Client(), &rdmapb.StatusRequest{}); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("client, wrong reply type: %v", err)
	}
}

func TestMalformedRequests(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	ac, rc := a.Client(), NewClient(sys, a.PID())
	mine := requestBuf(t, ctx, ac, 4096, buffer.AccessReadWrite)
	theirs := requestBuf(t, ctx, b.Client(), 4096, buffer.AccessReadWrite)

	t.Run("RequestBuffer", func(t *testing.T) {
		for _, tc := range []struct {
			size   uint64
			access buffer.Access
		}{{0, buffer.AccessReadWrite}, {1, 4}, {1, 0xffffffff}, {0, 8}} {
			if _, err := rc.RequestBuffer(ctx, tc.size, tc.access); !errors.Is(err, buffer.ErrInvalid) {
				t.Fatalf("size %d access %#x: %v", tc.size, uint32(tc.access), err)
			}
		}
		small := NewClient(sys, a.PID())
		small.maxMsg = 1
		if _, err := small.RequestBuffer(ctx, 1<<40, buffer.AccessRead); !errors.Is(err, ErrMessageTooLarge) {
			t.Fatalf("oversize message: %v", err)
		}
	})

	t.Run("ReleaseBuffer", func(t *testing.T) {
		res := ask(t, sys, a.PID(), &rdmapb.ReleaseBuffer{})
		if r, ok := res.(*rdmapb.ReleaseBufferResponse); !ok || r.Error.GetCode() != rdmapb.Code_INVALID_ARGUMENT {
			t.Fatalf("nil buffer: %v", res)
		}
		shortKey := mine.Proto()
		shortKey.Key = shortKey.Key[:5]
		res = ask(t, sys, a.PID(), &rdmapb.ReleaseBuffer{Buffer: shortKey})
		if r, ok := res.(*rdmapb.ReleaseBufferResponse); !ok || !errors.Is(toError(r.Error), buffer.ErrInvalid) {
			t.Fatalf("short key: %v", res)
		}
		if err := rc.ReleaseBuffer(ctx, buffer.Buffer{}); !errors.Is(err, buffer.ErrInvalid) {
			t.Fatalf("zero buffer: %v", err)
		}
		wrongKey := mine
		wrongKey.Key[15] ^= 0x80
		if err := rc.ReleaseBuffer(ctx, wrongKey); !errors.Is(err, buffer.ErrBadKey) {
			t.Fatalf("wrong key: %v", err)
		}
		if err := rc.ReleaseBuffer(ctx, theirs); !errors.Is(err, buffer.ErrReleased) {
			t.Fatalf("foreign owner: %v", err)
		}
		noSuch := mine
		noSuch.Region += 1000
		if err := rc.ReleaseBuffer(ctx, noSuch); !errors.Is(err, buffer.ErrReleased) {
			t.Fatalf("unknown region: %v", err)
		}
		// Nothing was released by the bad requests.
		if _, err := a.Bytes(mine); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Bytes(theirs); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("RouteHandshake", func(t *testing.T) {
		_, info, err := a.Backend().PrepareRoute(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		good := func() *rdmapb.RouteHandshake {
			return &rdmapb.RouteHandshake{Version: ProtocolVersion, InitiatorId: a.ID(), InitiatorAddr: sys.Address(), Backend: "tcp", Endpoint: info}
		}
		for _, tc := range []struct {
			name string
			mod  func(h *rdmapb.RouteHandshake)
			want error
		}{
			{"wrong version", func(h *rdmapb.RouteHandshake) { h.Version = ProtocolVersion + 1 }, backend.ErrVersion},
			{"version 0", func(h *rdmapb.RouteHandshake) { h.Version = 0 }, backend.ErrVersion},
			{"garbage endpoint", func(h *rdmapb.RouteHandshake) { h.Endpoint = []byte("garbage endpoint bytes") }, backend.ErrProtocol},
			{"empty endpoint", func(h *rdmapb.RouteHandshake) { h.Endpoint = nil }, backend.ErrProtocol},
			{"endpoint of another version", func(h *rdmapb.RouteHandshake) { h.Endpoint = []byte{9, 0, 1, 0} }, backend.ErrVersion},
			{"zero connections", func(h *rdmapb.RouteHandshake) { h.Endpoint = []byte{1, 0, 0, 0} }, backend.ErrProtocol},
			{"no initiator", func(h *rdmapb.RouteHandshake) { h.InitiatorId = 0 }, buffer.ErrInvalid},
		} {
			h := good()
			tc.mod(h)
			res, ok := ask(t, sys, b.PID(), h).(*rdmapb.RouteHandshakeResponse)
			if !ok {
				t.Fatalf("%s: reply %T", tc.name, res)
			}
			if err := toError(res.Error); !errors.Is(err, tc.want) || len(res.Endpoint) != 0 {
				t.Fatalf("%s: %v (endpoint %d bytes)", tc.name, err, len(res.Endpoint))
			}
		}
		h := good()
		h.Backend = "ibverbs"
		if res := ask(t, sys, b.PID(), h).(*rdmapb.RouteHandshakeResponse); res.Error.GetCode() == rdmapb.Code_OK || len(res.Endpoint) != 0 {
			t.Fatalf("other backend: %v", res)
		}
		// The well-formed handshake is accepted.
		if res := ask(t, sys, b.PID(), good()).(*rdmapb.RouteHandshakeResponse); res.Error != nil || len(res.Endpoint) == 0 || res.ResponderId != b.ID() {
			t.Fatalf("good handshake: %v", res)
		}
	})

	t.Run("RequestQueuePair", func(t *testing.T) {
		if _, err := ac.RequestQueuePair(ctx, nil); !errors.Is(err, buffer.ErrInvalid) {
			t.Fatalf("nil peer: %v", err)
		}
		for _, ref := range []*rdmapb.ManagerRef{nil, {}, {Address: sys.Address()}, {Id: "b"}} {
			res := ask(t, sys, a.PID(), &rdmapb.RequestQueuePair{Peer: ref})
			if r, ok := res.(*rdmapb.RequestQueuePairResponse); !ok || !errors.Is(toError(r.Error), buffer.ErrInvalid) || r.QpId != 0 {
				t.Fatalf("peer %v: %v", ref, res)
			}
		}
		// Only a client in the manager's process gets queue pairs.
		if _, err := rc.RequestQueuePair(ctx, b.PID()); !errors.Is(err, ErrNotLocal) {
			t.Fatalf("client without the manager: %v", err)
		}
		res := ask(t, sys, a.PID(), &rdmapb.ReleaseQueuePair{QpId: 12345})
		if r, ok := res.(*rdmapb.ReleaseQueuePairResponse); !ok || !errors.Is(toError(r.Error), buffer.ErrReleased) {
			t.Fatalf("release unknown queue pair: %v", res)
		}
	})

	if id, err := ac.Ping(ctx); err != nil || id != a.ID() {
		t.Fatalf("ping after malformed requests: %v", err)
	}
}

// A registry limit answers RESOURCE_EXHAUSTED. The client maps that code to
// an error wrapping both buffer.ErrExhausted and backend.ErrLimit: the wire
// code does not say which side's limit was hit, so either errors.Is works.
func TestRegistryLimit(t *testing.T) {
	sys := newSystem(t)
	a := startManager(t, sys, Config{Name: "a", Limits: buffer.Limits{MaxBytes: 1 << 20, MaxRegions: 3}})
	ctx := testCtx(t)
	c := NewClient(sys, a.PID())
	big := requestBuf(t, ctx, c, 1<<20, buffer.AccessReadWrite)
	for _, size := range []uint64{1, 1 << 20, 1 << 50} {
		_, err := c.RequestBuffer(ctx, size, buffer.AccessRead)
		if !errors.Is(err, buffer.ErrExhausted) || !errors.Is(err, backend.ErrLimit) {
			t.Fatalf("%d bytes over the limit: %v", size, err)
		}
	}
	if err := c.ReleaseBuffer(ctx, big); err != nil {
		t.Fatal(err)
	}
	var bufs []buffer.Buffer
	for range 3 {
		bufs = append(bufs, requestBuf(t, ctx, c, 1000, buffer.AccessRead))
	}
	if _, err := c.RequestBuffer(ctx, 1, buffer.AccessRead); !errors.Is(err, buffer.ErrExhausted) {
		t.Fatalf("region over the limit: %v", err)
	}
	// Release makes room again.
	if err := c.ReleaseBuffer(ctx, bufs[1]); err != nil {
		t.Fatal(err)
	}
	requestBuf(t, ctx, c, 1000, buffer.AccessRead)
	if st, _ := a.Client().Status(ctx); st.RegisteredBytes != 3000 || len(st.Buffers) != 3 {
		t.Fatalf("status %v", st)
	}
}

func TestMaxRoutes(t *testing.T) {
	sys := newSystem(t)
	a := startManager(t, sys, Config{Name: "a", MaxRoutes: 1})
	b := startManager(t, sys, Config{Name: "b"})
	c := startManager(t, sys, Config{Name: "c"})
	ctx := testCtx(t)
	qpb, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	requestQP(t, ctx, a, b.PID()) // same peer: same route
	if _, err := a.Client().RequestQueuePair(ctx, c.PID()); !errors.Is(err, backend.ErrLimit) {
		t.Fatalf("route over the limit: %v", err)
	}
	qpb.Release()
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].Refs != 1 {
		t.Fatalf("routes %v", rs)
	}
}

// When the peer manager goes away, the old queue pair fails with PeerGone
// or Closed and a new request reaches the manager that replaced it.
func TestRouteFailureAndRebuild(t *testing.T) {
	sys := newSystem(t)
	a := startManager(t, sys, Config{Name: "a"})
	ctx := testCtx(t)
	b, err := New(sys, Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 16 << 20
	local := requestBuf(t, ctx, a.Client(), n, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, b.Client(), n, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	oldRoute := qp.Route()

	// Work in flight while the peer closes either completes or fails with
	// the route's error.
	inflight := qp.Get(local, remote)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inflight.Wait(ctx); err != nil && !errors.Is(err, backend.ErrPeerGone) && !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("in-flight get: %v", err)
	}
	select {
	case <-oldRoute.Done():
	case <-ctx.Done():
		t.Fatal("route did not notice the peer closed")
	}
	if err := oldRoute.Err(); !errors.Is(err, backend.ErrPeerGone) && !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("route error %v", err)
	}
	for _, w := range []*queuepair.WorkRequest{qp.Put(local, remote), qp.Get(local, remote)} {
		if err := w.Wait(ctx); !errors.Is(err, backend.ErrPeerGone) && !errors.Is(err, backend.ErrClosed) {
			t.Fatalf("op on the old queue pair: %v", err)
		}
	}
	rs := routes(t, ctx, a)
	if len(rs) != 1 || !strings.HasPrefix(rs[0].State, "down") {
		t.Fatalf("routes %v", rs)
	}
	// While nobody answers under the name, requests fail cleanly.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := a.Client().RequestQueuePair(short, b.PID()); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("queue pair to the closed peer: %v", err)
	}
	cancel()

	// A new manager under the same name.
	b2 := startManager(t, sys, Config{Name: "b"})
	if !b2.PID().Equal(b.PID()) || b2.ID() == b.ID() {
		t.Fatalf("new manager %s %x", b2.PID(), b2.ID())
	}
	qp2 := requestQP(t, ctx, a, b.PID())
	if qp2.PeerID() != b2.ID() || qp2.Route() == oldRoute || routeDead(qp2.Route().(backend.Route)) {
		t.Fatalf("new queue pair to %x on route %p (old %p)", qp2.PeerID(), qp2.Route(), oldRoute)
	}
	remote2 := requestBuf(t, ctx, b2.Client(), n, buffer.AccessReadWrite)
	crand.Read(mustBytes(t, a, local))
	if err := qp2.Put(local, remote2).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustBytes(t, a, local), mustBytes(t, b2, remote2)) {
		t.Fatal("bytes differ")
	}
	// The old manager's buffer is not the new peer's.
	if err := qp2.Put(local, remote).Err(); !errors.Is(err, queuepair.ErrWrongPeer) {
		t.Fatalf("old peer's buffer on the new route: %v", err)
	}
	// The old queue pair stays failed; releasing it leaves the new route.
	if err := qp.Put(local, remote).Wait(ctx); !errors.Is(err, backend.ErrPeerGone) && !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("old queue pair after rebuild: %v", err)
	}
	qp.Release()
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].State != "up" || rs[0].PeerId != b2.ID() || rs[0].Refs != 1 {
		t.Fatalf("routes %v", rs)
	}
}

func TestClose(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	local := requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, b.Client(), 4096, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	pid := a.PID()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = a.Close() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close again: %v", err)
	}

	// Every request fails, within the ctx.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := a.Client().RequestBuffer(short, 10, buffer.AccessRead); !errors.Is(err, ErrClosed) {
		t.Fatalf("request buffer after close: %v", err)
	}
	if _, err := a.Client().RequestQueuePair(short, b.PID()); !errors.Is(err, ErrClosed) {
		t.Fatalf("request queue pair after close: %v", err)
	}
	if _, err := NewClient(sys, pid).Ping(short); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("ping after close: %v", err)
	}
	if err := NewClient(sys, pid).ReleaseBuffer(short, local); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("release buffer after close: %v", err)
	}
	if short.Err() != nil {
		t.Fatal("requests after close ran into the ctx")
	}
	// The queue pair's route was closed and the local memory released.
	if err := qp.Put(local, remote).Wait(ctx); !errors.Is(err, backend.ErrClosed) && !errors.Is(err, buffer.ErrReleased) {
		t.Fatalf("put after close: %v", err)
	}
	if st := a.reg.Stats(); st.Regions != 0 || st.Bytes != 0 {
		t.Fatalf("registry after close %+v", st)
	}
	if _, err := a.reg.Allocate(1, buffer.AccessRead); !errors.Is(err, buffer.ErrClosed) {
		t.Fatalf("allocate after close: %v", err)
	}
	if err := a.Start(ctx); err == nil {
		t.Fatal("start after close")
	}
	// The peer is unaffected.
	if _, err := b.Bytes(remote); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().Ping(ctx); err != nil {
		t.Fatal(err)
	}

	// Close before Start, twice.
	m, err := New(sys, Config{Name: "never-started"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// A closed manager's actor answers every request with CLOSED, so requests
// still queued when Close stops it do not wait for a timeout. The actor is
// stopped by Close; a second actor on the closed manager stands for it.
func TestClosedManagerAnswersClosed(t *testing.T) {
	sys, a, _ := newPair(t)
	ctx := testCtx(t)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	pid := sys.Root.Spawn(protoactor.PropsFromProducer(func() protoactor.Actor { return &managerActor{m: a} }))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	c := NewClient(sys, pid)
	if _, err := c.Ping(ctx); !errors.Is(err, ErrClosed) || !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("ping: %v", err)
	}
	if _, err := c.RequestBuffer(ctx, 10, buffer.AccessRead); !errors.Is(err, ErrClosed) {
		t.Fatalf("request buffer: %v", err)
	}
	if _, err := c.Status(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("status: %v", err)
	}
	res := ask(t, sys, pid, &rdmapb.RouteHandshake{Version: ProtocolVersion, InitiatorId: 1, Backend: "tcp"})
	if er, ok := res.(*rdmapb.ErrorReply); !ok || er.Error.GetCode() != rdmapb.Code_CLOSED {
		t.Fatalf("handshake: %v", res)
	}
}

// Close while queue pairs are being requested: every request returns (with
// a queue pair or an error) and Close does not hang.
func TestCloseDuringRequests(t *testing.T) {
	sys := newSystem(t)
	b := startManager(t, sys, Config{Name: "b"})
	a, err := New(sys, Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qp, err := a.Client().RequestQueuePair(ctx, b.PID())
			if err == nil {
				qp.Release()
			} else if ctx.Err() != nil {
				t.Errorf("request ran into the ctx: %v", err)
			}
		}()
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// After every manager is closed and the system shut down, no goroutine of
// this module is left.
func TestNoGoroutineLeak(t *testing.T) {
	sys := NewActorSystem(nil)
	a, err := New(sys, Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(sys, Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for _, m := range []*Manager{a, b} {
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	local := requestBuf(t, ctx, a.Client(), 1<<20, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), 1<<20, buffer.AccessReadWrite)
	qp, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	qp2, err := b.Client().RequestQueuePair(ctx, a.PID())
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := qp2.Put(remote, local).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_ = qp.Get(local, remote) // possibly in flight at Close
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := a.Client().RequestQueuePair(short, protoactor.NewPID(sys.Address(), "nobody")); !errors.Is(err, ErrUnknownPeer) {
		t.Fatal(err)
	}
	cancel()
	qp2.Release()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	sys.Shutdown()

	var left []string
	for {
		left = ourGoroutines()
		if len(left) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d goroutines left:\n\n%s", len(left), strings.Join(left, "\n\n"))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ourGoroutines returns the stacks of goroutines other than the caller's
// that run or were started by code of this module.
func ourGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // the calling goroutine comes first
			continue
		}
		for _, line := range strings.Split(g, "\n") {
			if !strings.HasPrefix(line, "\t") && strings.Contains(line, "github.com/rdmamgr/rdmamgr/") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code rdmapb.Code
		want []error
	}{
		{fmt.Errorf("x: %w", buffer.ErrExhausted), rdmapb.Code_RESOURCE_EXHAUSTED, []error{buffer.ErrExhausted, backend.ErrLimit}},
		{fmt.Errorf("x: %w", backend.ErrLimit), rdmapb.Code_RESOURCE_EXHAUSTED, []error{buffer.ErrExhausted, backend.ErrLimit}},
		{ErrClosed, rdmapb.Code_CLOSED, []error{ErrClosed, backend.ErrClosed}},
		{backend.ErrClosed, rdmapb.Code_CLOSED, []error{ErrClosed, backend.ErrClosed}},
		{buffer.ErrClosed, rdmapb.Code_CLOSED, []error{ErrClosed, backend.ErrClosed}},
		{ErrUnknownMessage, rdmapb.Code_UNKNOWN_MESSAGE, []error{ErrUnknownMessage}},
		{ErrUnknownPeer, rdmapb.Code_UNKNOWN_PEER, []error{ErrUnknownPeer}},
		{ErrNotLocal, rdmapb.Code_NOT_LOCAL, []error{ErrNotLocal, buffer.ErrInvalid}},
		{queuepair.ErrWrongPeer, rdmapb.Code_WRONG_PEER, []error{queuepair.ErrWrongPeer}},
		{queuepair.ErrReleased, rdmapb.Code_RELEASED, []error{buffer.ErrReleased}},
		{buffer.ErrBadKey, rdmapb.Code_BAD_KEY, []error{buffer.ErrBadKey}},
		{backend.ErrVersion, rdmapb.Code_VERSION_MISMATCH, []error{backend.ErrVersion}},
		{backend.ErrProtocol, rdmapb.Code_PROTOCOL, []error{backend.ErrProtocol}},
		{backend.ErrPeerGone, rdmapb.Code_PEER_GONE, []error{backend.ErrPeerGone}},
		{context.DeadlineExceeded, rdmapb.Code_DEADLINE_EXCEEDED, []error{backend.ErrDeadline}},
	} {
		e := fromError(tc.err)
		if e.GetCode() != tc.code {
			t.Fatalf("%v: code %v, want %v", tc.err, e.GetCode(), tc.code)
		}
		back := toError(e)
		for _, w := range tc.want {
			if !errors.Is(back, w) {
				t.Fatalf("%v -> %v -> %v: does not wrap %v", tc.err, tc.code, back, w)
			}
		}
	}
	if fromError(nil) != nil || toError(nil) != nil || toError(&rdmapb.Error{}) != nil {
		t.Fatal("nil mapping")
	}
	if err := toError(&rdmapb.Error{Code: rdmapb.Code_INTERNAL, Message: "boom"}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("internal: %v", err)
	}
}
