//go:build linux

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// testCtx returns a context that bounds one step of a test, so that a bug
// fails the test instead of hanging it.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newRand returns a seeded generator and logs the seed, so a failure can be
// replayed.
func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	var seed [32]byte
	s1, s2 := rand.Uint64(), rand.Uint64()
	binary.LittleEndian.PutUint64(seed[:], s1)
	binary.LittleEndian.PutUint64(seed[8:], s2)
	t.Logf("random seed %#x %#x", s1, s2)
	return rand.New(rand.NewChaCha8(seed))
}

// fill writes random bytes into p.
func fill(r *rand.Rand, p []byte) {
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, r.Uint64())
		p = p[8:]
	}
	for i := range p {
		p[i] = byte(r.Uint32())
	}
}

// localBuffer allocates a read-write buffer at the test's manager and
// releases it when the test ends; it returns the handle and its memory.
func localBuffer(t *testing.T, size uint64) (buffer.Buffer, []byte) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	b, err := local.mgr.Client().RequestBuffer(ctx, size, buffer.AccessReadWrite)
	if err != nil {
		t.Fatalf("local buffer of %d bytes: %v", size, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := local.mgr.Client().ReleaseBuffer(ctx, b); err != nil {
			t.Errorf("release local buffer: %v", err)
		}
	})
	mem, err := local.mgr.Bytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, mem
}

// remoteBuffer asks daemon d for a buffer; the daemon frees it when it exits.
func remoteBuffer(t *testing.T, d *daemon, size uint64, access buffer.Access) buffer.Buffer {
	t.Helper()
	b, err := d.client().RequestBuffer(testCtx(t, 30*time.Second), size, access)
	if err != nil {
		t.Fatalf("%s: request buffer of %d bytes: %v", d.name, size, err)
	}
	if b.OwnerAddr != d.addr || b.Length != size || b.Access != access {
		t.Fatalf("%s: request buffer: got %v", d.name, b)
	}
	return b
}

// queuePair asks the test's manager for a queue pair to d, released when
// the test ends.
func queuePair(t *testing.T, d *daemon) *queuepair.QueuePair {
	t.Helper()
	qp, err := local.mgr.Client().RequestQueuePair(testCtx(t, 30*time.Second), d.pid)
	if err != nil {
		t.Fatalf("queue pair to %s: %v", d.name, err)
	}
	t.Cleanup(qp.Release)
	return qp
}

// slice is Buffer.Slice for ranges the test computed to be valid; safe on
// any goroutine (a bad range is a bug in the test: it panics).
func slice(b buffer.Buffer, off, n uint64) buffer.Buffer {
	s, err := b.Slice(off, n)
	if err != nil {
		panic(fmt.Sprintf("slice [%d,+%d) of %v: %v", off, n, b, err))
	}
	return s
}

// wait waits for a work request within opTimeout; one that does not
// complete by then is reported as errHung. Safe on any goroutine.
func wait(w *queuepair.WorkRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_ = w.Wait(ctx) // returns the work request's error, or ctx's
	if done, err := w.Poll(); done {
		return err
	}
	return fmt.Errorf("%w within %v", errHung, opTimeout)
}

// errHung: a work request did not complete.
var errHung = errors.New("work request did not complete")

// opTimeout bounds one Put or Get; longer than the queue pair's own
// deadline (30 s), so that deadline is what a stuck operation reports.
const opTimeout = 90 * time.Second

// firstDiff describes where a and b first differ.
func firstDiff(a, b []byte) string {
	if len(a) != len(b) {
		return fmt.Sprintf("lengths %d and %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf("first difference at byte %d of %d: %#02x != %#02x", i, len(a), a[i], b[i])
		}
	}
	return "equal"
}

// checkLocalClean registers a check, run after the test's other cleanups,
// that the test's manager holds no route and no registered memory left.
func checkLocalClean(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := local.mgr.Client().Status(ctx)
		if err != nil {
			t.Errorf("status of the test's manager: %v", err)
			return
		}
		if len(st.Routes) != 0 || len(st.Buffers) != 0 || st.RegisteredBytes != 0 {
			t.Errorf("test's manager not clean after the test: %d routes %v, %d buffers, %d bytes registered",
				len(st.Routes), st.Routes, len(st.Buffers), st.RegisteredBytes)
		}
	})
}

// wireErr turns a wire error into the sentinel the actor client reports for
// it, for replies the test receives without the client.
func wireErr(e *rdmapb.Error) error {
	if e == nil || e.Code == rdmapb.Code_OK {
		return nil
	}
	var s error
	switch e.Code {
	case rdmapb.Code_UNKNOWN_MESSAGE:
		s = rdmamgr.ErrUnknownMessage
	case rdmapb.Code_UNKNOWN_PEER:
		s = rdmamgr.ErrUnknownPeer
	case rdmapb.Code_NOT_LOCAL:
		return fmt.Errorf("%s: %s: %w, %w", e.Code, e.Message, rdmamgr.ErrNotLocal, rdmamgr.ErrInvalid)
	default:
		s = backend.Sentinel(e.Code)
	}
	if s == nil {
		return fmt.Errorf("%s: %s", e.Code, e.Message)
	}
	return fmt.Errorf("%s: %s: %w", e.Code, e.Message, s)
}

// runStatus runs `rdmamgr status --peer` against d as a separate process.
func runStatus(d *daemon) (string, error) {
	out, errOut, err := runRdmamgr(time.Minute, "status", "--peer", d.addr)
	return out + errOut, err
}

// errRefused: the daemon refused a gRPC call or ended a stream with the
// expected status.
var errRefused = errors.New("refused by the daemon")

// refusedWith wraps err in errRefused when it carries the gRPC code want.
func refusedWith(err error, want codes.Code) error {
	if err != nil && status.Code(err) == want {
		return fmt.Errorf("%w: %v", errRefused, err)
	}
	return err
}

// remotingStream opens protoactor's Remoting.Receive stream to d by hand and
// introduces itself as a server connection, as a peer's endpoint writer
// does.
func remotingStream(t *testing.T, ctx context.Context, d *daemon) remote.Remoting_ReceiveClient {
	t.Helper()
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc dial %s: %v", d.addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		t.Fatalf("open remoting stream: %v", err)
	}
	hello := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "hostile-test", Address: "127.0.0.1:1"}},
	}}}
	if err := s.Send(hello); err != nil {
		t.Fatalf("send connect request: %v", err)
	}
	resp, err := s.Recv()
	if err != nil || resp.GetConnectResponse() == nil {
		t.Fatalf("connect response: %v %v", resp, err)
	}
	return s
}

// batch wraps envelopes into a RemoteMessage.
func batch(typeNames []string, targets []*protoactor.PID, envs ...*remote.MessageEnvelope) *remote.RemoteMessage {
	return &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
		TypeNames: typeNames, Targets: targets, Envelopes: envs,
	}}}
}

// mustMarshal is proto.Marshal for messages that always marshal.
func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// unknownMessage returns a protobuf message of a type no rdmamgr binary
// links, built at run time.
func unknownMessage() proto.Message {
	fd := &descriptorpb.FileDescriptorProto{
		Name:        proto.String("rdmamgr_hostile_test/unknown.proto"),
		Package:     proto.String("rdmamgr.hostiletest"),
		Syntax:      proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Unknown")}},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		panic(err)
	}
	return dynamicpb.NewMessage(f.Messages().Get(0))
}
