package remoteguard

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/rdmamgr/rdmamgr/internal/control"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

const (
	protoSerializerID = 0 // remote's proto serializer
	jsonSerializerID  = 1 // remote's JSON serializer
)

var (
	remotingPrefix = "/" + remote.Remoting_ServiceDesc.ServiceName + "/"

	nameStop       = string(proto.MessageName(&protoactor.Stop{}))
	namePoisonPill = string(proto.MessageName(&protoactor.PoisonPill{}))
	nameWatch      = string(proto.MessageName(&protoactor.Watch{}))
	nameUnwatch    = string(proto.MessageName(&protoactor.Unwatch{}))
	nameTerminated = string(proto.MessageName(&protoactor.Terminated{}))
)

// unknownMessage is the text of the manager's ErrUnknownMessage, which the
// guard's reply to a type it does not know ends with (the client says it
// once).
const unknownMessage = "actor: unknown message"

// guard holds what the interceptors need.
type guard struct {
	sys  *protoactor.ActorSystem
	book *control.Book
	// streams bounds the Remoting streams served at once (server-wide).
	streams chan struct{}
}

// serverOptions returns the gRPC server options installing the guard.
func (g *guard) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}
}

func (g *guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	if strings.HasPrefix(info.FullMethod, remotingPrefix) {
		// protoactor implements none of Remoting's unary methods: they
		// panic.
		return nil, status.Errorf(codes.Unimplemented, "%s is not served", info.FullMethod)
	}
	defer g.recoverTo(info.FullMethod, &err)
	return handler(ctx, req)
}

func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer g.recoverTo(info.FullMethod, &err)
	// A stream over the cap is refused before anything is read from it:
	// the memory a peer can make us hold is bounded by streams times the
	// receive limit.
	select {
	case g.streams <- struct{}{}:
		defer func() { <-g.streams }()
	default:
		g.book.Refuse(control.RefusedStream, "refused a gRPC stream over the cap", "cap", cap(g.streams))
		return status.Errorf(codes.ResourceExhausted, "too many streams")
	}
	c := &connPeer{}
	if p, ok := peer.FromContext(ss.Context()); ok {
		c.remote, c.local, c.src = addrOf(p.Addr), addrOf(p.LocalAddr), p.Addr.String()
	}
	return handler(srv, &guardedStream{ServerStream: ss, g: g, c: c})
}

// recoverTo turns a panic in a handler into an error for its caller.
func (g *guard) recoverTo(method string, err *error) {
	if p := recover(); p != nil {
		g.sys.Logger().Error("panic serving a peer", "method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "internal error")
	}
}

// guardedStream checks each message protoactor receives.
type guardedStream struct {
	grpc.ServerStream
	g *guard
	c *connPeer
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	rm, ok := m.(*remote.RemoteMessage)
	if !ok {
		return nil
	}
	if err := s.g.check(rm, s.c); err != nil {
		s.g.book.Refuse(control.RefusedMalformed, "refused a malformed message from a peer", "from", s.c.remote.String(), "err", err)
		return status.Errorf(codes.InvalidArgument, "malformed remote message: %v", err)
	}
	return nil
}

// check validates rm and drops the envelopes that must not be delivered;
// an error means the stream must end.
func (g *guard) check(rm *remote.RemoteMessage, c *connPeer) error {
	switch t := rm.MessageType.(type) {
	case *remote.RemoteMessage_ConnectRequest:
		if t.ConnectRequest == nil {
			return errors.New("empty connect request")
		}
		if sc, ok := t.ConnectRequest.ConnectionType.(*remote.ConnectRequest_ServerConnection); ok && sc.ServerConnection == nil {
			return errors.New("empty server connection")
		}
	case *remote.RemoteMessage_MessageBatch:
		return g.checkBatch(t.MessageBatch, c)
	}
	return nil
}

func (g *guard) checkBatch(b *remote.MessageBatch, c *connPeer) error {
	if b == nil {
		return errors.New("empty message batch")
	}
	for i, p := range b.Targets {
		if p == nil {
			return fmt.Errorf("target %d is empty", i)
		}
	}
	for i, p := range b.Senders {
		if p == nil {
			return fmt.Errorf("sender %d is empty", i+1)
		}
	}
	kept := b.Envelopes[:0]
	for i, e := range b.Envelopes {
		if err := validEnvelope(b, i, e); err != nil {
			return err
		}
		if g.keep(b, e, c) {
			kept = append(kept, e)
		}
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
	return nil
}

// validEnvelope checks that e's indices and serializer are in range.
func validEnvelope(b *remote.MessageBatch, i int, e *remote.MessageEnvelope) error {
	switch {
	case e == nil:
		return fmt.Errorf("envelope %d is empty", i)
	case e.TypeId < 0 || int(e.TypeId) >= len(b.TypeNames):
		return fmt.Errorf("envelope %d: type %d of %d", i, e.TypeId, len(b.TypeNames))
	case e.Target < 0 || int(e.Target) >= len(b.Targets):
		return fmt.Errorf("envelope %d: target %d of %d", i, e.Target, len(b.Targets))
	case e.Sender < 0 || int(e.Sender) > len(b.Senders):
		return fmt.Errorf("envelope %d: sender %d of %d", i, e.Sender, len(b.Senders))
	case e.SerializerId != protoSerializerID && e.SerializerId != jsonSerializerID:
		return fmt.Errorf("envelope %d: serializer %d", i, e.SerializerId)
	}
	return nil
}

// keep reports whether the valid envelope e may be delivered, stamping it
// as remote if so; it counts and logs the refusal otherwise.
func (g *guard) keep(b *remote.MessageBatch, e *remote.MessageEnvelope, c *connPeer) bool {
	name := b.TypeNames[e.TypeId]
	var sender *protoactor.PID
	if e.Sender > 0 {
		sender = b.Senders[e.Sender-1]
		if err := g.checkSender(c, sender); err != nil {
			g.book.Refuse(control.RefusedForgedSender, "dropped a message with a forged sender", "type", name, "from", c.src, "err", err)
			return false
		}
	}
	if err := g.checkTarget(b.Targets[e.Target]); err != nil {
		g.book.Refuse(control.RefusedForeignTarget, "dropped a message for another process", "type", name, "from", c.remote.String(), "err", err)
		g.wrongAddress(b, e)
		return false
	}
	if e.SerializerId == protoSerializerID {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
		if err != nil {
			g.unknownType(b, e, name)
			return false
		}
		if err := g.validPIDs(mt, name, e.MessageData, c); err != nil {
			g.book.Refuse(control.RefusedForgedSender, "dropped a watch message from a peer", "type", name, "from", c.remote.String(), "err", err)
			return false
		}
	}
	if name == nameStop || name == namePoisonPill {
		g.book.Refuse(control.RefusedStopActor, "dropped a request from a peer to stop an actor", "type", name, "target", pidString(b.Targets[e.Target]))
		return false
	}
	stamp(e, sender, c)
	return true
}

// validPIDs checks that a Watch, Unwatch or Terminated names its PID
// (protoactor dereferences it) and that a watcher is the connection's peer
// (we send it Terminated); other types pass.
func (g *guard) validPIDs(mt protoreflect.MessageType, name string, data []byte, c *connPeer) error {
	if name != nameWatch && name != nameUnwatch && name != nameTerminated {
		return nil
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(data, m); err != nil {
		return nil // protoactor fails to decode it too, without panicking
	}
	var pid *protoactor.PID
	switch v := m.(type) {
	case *protoactor.Watch:
		pid = v.Watcher
	case *protoactor.Unwatch:
		pid = v.Watcher
	case *protoactor.Terminated:
		pid = v.Who
	}
	if pid == nil || pid.Address == "" || pid.Id == "" {
		return errors.New("no PID")
	}
	if name == nameTerminated {
		return nil
	}
	return g.checkSender(c, pid)
}

// wrongAddress answers a request (an envelope with a checked sender) that
// named this process by an address it does not answer at, such as
// 127.0.0.1:8090 for a daemon that advertises 10.0.0.1:8090, so that the
// caller learns the right address at once instead of timing out. The
// answer goes only to the sender, which the guard checked is the
// connection's own peer.
func (g *guard) wrongAddress(b *remote.MessageBatch, e *remote.MessageEnvelope) {
	if e.Sender == 0 {
		return
	}
	sender := proto.Clone(b.Senders[e.Sender-1]).(*protoactor.PID)
	sender.RequestId = e.SenderRequestId
	g.sys.Root.Send(sender, &rdmapb.ErrorReply{Error: &rdmapb.Error{
		Code: rdmapb.Code_UNKNOWN_PEER,
		Message: fmt.Sprintf("this process answers at %s, not %s: name it by that address",
			g.sys.Address(), b.Targets[e.Target].Address),
	}})
}

// unknownType answers an envelope of a type this binary does not link as
// the manager answers any message it does not handle.
func (g *guard) unknownType(b *remote.MessageBatch, e *remote.MessageEnvelope, name string) {
	g.book.Refuse(control.RefusedUnknownType, "dropped a message of an unknown type from a peer", "type", name)
	if e.Sender == 0 {
		return
	}
	sender := proto.Clone(b.Senders[e.Sender-1]).(*protoactor.PID)
	sender.RequestId = e.SenderRequestId
	g.sys.Root.Send(sender, &rdmapb.ErrorReply{Error: &rdmapb.Error{
		Code:    rdmapb.Code_UNKNOWN_MESSAGE,
		Message: fmt.Sprintf("message type %q: %s", name, unknownMessage),
	}})
}
