package remoteguard

import (
	"errors"
	"fmt"
	"io"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// reader serves the Remoting stream of each peer connection: it answers
// the connect request and delivers each batch's envelopes to the local
// actors they name. The guard's interceptor (guard.go) has checked and
// stamped every batch before it gets here; the reader still checks every
// index itself, so a batch that reaches it any other way cannot panic it.
// The unary Remoting methods are Unimplemented.
type reader struct {
	remote.UnimplementedRemotingServer
	r *Remote
}

func (rd *reader) Receive(stream remote.Remoting_ReceiveServer) error {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch t := msg.MessageType.(type) {
		case *remote.RemoteMessage_ConnectRequest:
			if _, ok := t.ConnectRequest.GetConnectionType().(*remote.ConnectRequest_ServerConnection); !ok {
				return status.Error(codes.InvalidArgument, "only server connections are served")
			}
			if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectResponse{
				ConnectResponse: &remote.ConnectResponse{MemberId: rd.r.sys.ID},
			}}); err != nil {
				return err
			}
		case *remote.RemoteMessage_MessageBatch:
			if err := rd.deliver(t.MessageBatch); err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
		}
	}
}

// deliver hands each envelope of b to its local target. A malformed
// envelope ends the stream (as protoactor's reader does); system messages
// from peers are dropped (the guard refuses the ones that matter, and no
// remote watch is served).
func (rd *reader) deliver(b *remote.MessageBatch) error {
	if b == nil {
		return errors.New("empty batch")
	}
	for i, e := range b.Envelopes {
		if err := validEnvelope(b, i, e); err != nil {
			return err
		}
		target := b.Targets[e.Target]
		if target == nil {
			return fmt.Errorf("envelope %d: empty target", i)
		}
		if target.Address != rd.r.sys.Address() {
			continue // never relayed (the guard refuses and counts it)
		}
		var sender *protoactor.PID
		if e.Sender > 0 {
			if sender = b.Senders[e.Sender-1]; sender == nil {
				return fmt.Errorf("envelope %d: empty sender", i)
			}
			if e.SenderRequestId > 0 {
				sender = proto.Clone(sender).(*protoactor.PID)
				sender.RequestId = e.SenderRequestId
			}
		}
		if e.TargetRequestId > 0 {
			target = proto.Clone(target).(*protoactor.PID)
			target.RequestId = e.TargetRequestId
		}
		msg, err := remote.Deserialize(e.MessageData, b.TypeNames[e.TypeId], e.SerializerId)
		if err != nil {
			return fmt.Errorf("envelope %d: %w", i, err)
		}
		if _, ok := msg.(protoactor.SystemMessage); ok {
			continue
		}
		if sender == nil && e.MessageHeader == nil {
			rd.r.sys.Root.Send(target, msg)
			continue
		}
		env := &protoactor.MessageEnvelope{Message: msg, Sender: sender}
		if e.MessageHeader != nil {
			env.Header = e.MessageHeader.HeaderData
		}
		rd.r.sys.Root.Send(target, env)
	}
	return nil
}
