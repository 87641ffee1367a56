package actor

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// fuzzKinds are the control messages a peer can send, each with the reply
// type the manager must answer it with.
var fuzzKinds = []struct {
	msg   func() proto.Message
	reply func(any) bool
}{
	{func() proto.Message { return new(rdmapb.RequestBuffer) }, is[*rdmapb.RequestBufferResponse]},
	{func() proto.Message { return new(rdmapb.ReleaseBuffer) }, is[*rdmapb.ReleaseBufferResponse]},
	{func() proto.Message { return new(rdmapb.RenewLease) }, is[*rdmapb.RenewLeaseResponse]},
	{func() proto.Message { return new(rdmapb.RevokeBuffer) }, is[*rdmapb.RevokeBufferResponse]},
	{func() proto.Message { return new(rdmapb.RequestQueuePair) }, is[*rdmapb.RequestQueuePairResponse]},
	{func() proto.Message { return new(rdmapb.ReleaseQueuePair) }, is[*rdmapb.ReleaseQueuePairResponse]},
	{func() proto.Message { return new(rdmapb.RouteHandshake) }, is[*rdmapb.RouteHandshakeResponse]},
	{func() proto.Message { return new(rdmapb.StatusRequest) }, is[*rdmapb.StatusResponse]},
	{func() proto.Message { return new(rdmapb.Ping) }, is[*rdmapb.Pong]},
	{func() proto.Message { return new(rdmapb.Pong) }, is[*rdmapb.ErrorReply]},
	{func() proto.Message { return new(rdmapb.Buffer) }, is[*rdmapb.ErrorReply]},
}

func is[T any](v any) bool { _, ok := v.(T); return ok }

// FuzzManagerMessages sends the manager arbitrary control messages, as a
// peer could: every one gets a reply of the right type, the manager keeps
// serving, and a handshake without the secret's MAC is always refused.
func FuzzManagerMessages(f *testing.F) {
	good := buffer.Buffer{OwnerID: 1, Region: 1, Length: 10, Access: buffer.AccessReadWrite}
	gb, _ := proto.Marshal(good.Proto())
	for k := range fuzzKinds {
		f.Add(uint8(k), []byte{})
		f.Add(uint8(k), []byte{0x0a, byte(len(gb))})
	}
	f.Add(uint8(0), []byte{0x08, 0x80, 0x20, 0x10, 0x03})       // RequestBuffer 4096 rw
	f.Add(uint8(1), append([]byte{0x0a, byte(len(gb))}, gb...)) // ReleaseBuffer of a foreign handle
	f.Add(uint8(6), []byte{0x08, 0x01, 0x11, 1, 0, 0, 0, 0, 0, 0, 0, 0x22, 0x03, 't', 'c', 'p'})

	secret, err := backend.NewSecret([]byte("fuzzing secret, 32 bytes long!!!"))
	if err != nil {
		f.Fatal(err)
	}
	sys := NewActorSystem(nil)
	m, err := New(sys, Config{Name: "fuzz", Secret: secret, Limits: buffer.Limits{MaxBytes: 64 << 20},
		RouteTimeout: 200 * time.Millisecond, OpTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	if err := startTCP(context.Background(), m); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close(); sys.Shutdown() })

	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		k := fuzzKinds[int(kind)%len(fuzzKinds)]
		msg := k.msg()
		if err := proto.Unmarshal(data, msg); err != nil {
			return
		}
		if q, ok := msg.(*rdmapb.RequestQueuePair); ok && q.Peer != nil {
			q.Peer.Address = "127.0.0.1:1" // never dial anything but loopback
		}
		res, err := sys.Root.RequestFuture(m.PID(), msg, 5*time.Second).Result()
		if err != nil {
			t.Fatalf("%T: no reply: %v", msg, err)
		}
		if !k.reply(res) {
			t.Fatalf("%T: reply %T", msg, res)
		}
		if r, ok := res.(*rdmapb.RouteHandshakeResponse); ok && codeOf(r.Error) != rdmapb.Code_UNAUTHENTICATED {
			t.Fatalf("forged handshake answered %v", r.Error)
		}
		if r, ok := res.(*rdmapb.RequestBufferResponse); ok && r.Error == nil {
			b, err := buffer.FromProto(r.Buffer)
			if err != nil {
				t.Fatalf("manager handed out a bad handle: %v", err)
			}
			if err := m.reg.Release(context.Background(), b); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
	})
}
