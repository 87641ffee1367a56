//go:build linux

// TestHostile's cases on the actor port: garbage, unknown control messages
// and types, bad route handshakes, a queue pair asked for from another
// process, remote Stop and PoisonPill, malformed and hostile
// actor-protocol batches, unary actor-protocol calls and a huge buffer
// request.

package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func hostileControlCases() []hostileCase {
	return []hostileCase{
		{
			name: "garbage on the actor port",
			want: []error{errConnClosed},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c, err := net.DialTimeout("tcp", h.d.addr, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				junk := make([]byte, 4096)
				fill(h.r, junk)
				if _, err := c.Write(junk); err != nil {
					return fmt.Errorf("%w: %w", errConnClosed, err)
				}
				return expectClosed(c)
			},
		},
		{
			name: "unknown control message",
			want: []error{rdmamgr.ErrUnknownMessage},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				// Without a sender there is no one to answer: it must
				// just be dropped.
				local.sys.Root.Send(h.d.pid, &rdmapb.Pong{ManagerId: 1})
				res, err := request(ctx, h.d, &rdmapb.Pong{})
				if err != nil {
					t.Fatalf("no answer to an unknown message: %v", err)
				}
				er, ok := res.(*rdmapb.ErrorReply)
				if !ok {
					t.Fatalf("unknown message answered with %T %v", res, res)
				}
				if er.Error.GetCode() != rdmapb.Code_UNKNOWN_MESSAGE {
					t.Errorf("code %v, want UNKNOWN_MESSAGE", er.Error.GetCode())
				}
				return wireErr(er.Error)
			},
		},
		{
			name: "route handshake with another protocol version",
			want: []error{rdmamgr.ErrVersion},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				return handshakeErr(t, ctx, h.d, &rdmapb.RouteHandshake{
					Version: actor.ProtocolVersion + 1, InitiatorId: 99, Backend: "tcp", Endpoint: []byte{1, 0, 1, 0},
				})
			},
		},
		{
			name: "route handshake for an unknown backend",
			want: []error{rdmamgr.ErrNotSupported},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				return handshakeErr(t, ctx, h.d, &rdmapb.RouteHandshake{
					Version: actor.ProtocolVersion, InitiatorId: 99, Backend: "carrier-pigeon", Endpoint: []byte{1, 0, 1, 0},
				})
			},
		},
		{
			name: "route handshake with malformed endpoint info",
			want: []error{rdmamgr.ErrProtocol},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				return handshakeErr(t, ctx, h.d, &rdmapb.RouteHandshake{
					Version: actor.ProtocolVersion, InitiatorId: 99, Backend: "tcp", Endpoint: []byte{1, 0, 0xff, 0xff, 0xff},
				})
			},
		},
		{
			// Queue pairs are only for callers in the manager's process.
			name: "queue pair requested from another process",
			want: []error{rdmamgr.ErrInvalid},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				res, err := request(ctx, h.d, &rdmapb.RequestQueuePair{Peer: &rdmapb.ManagerRef{Address: local.addr, Id: actor.DefaultName}})
				if err != nil {
					t.Fatal(err)
				}
				r, ok := res.(*rdmapb.RequestQueuePairResponse)
				if !ok {
					t.Fatalf("reply %T %v", res, res)
				}
				return wireErr(r.Error)
			},
		},
		{
			// protoactor would deliver these to the manager: a peer must
			// not be able to stop it.
			name: "remote Stop and PoisonPill to the manager",
			want: []error{nil},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				local.sys.Root.Stop(h.d.pid)
				local.sys.Root.Poison(h.d.pid)
				// Messages from one sender arrive in order: if the
				// manager answers a later Ping, it outlived both.
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, err := h.d.client().Ping(ctx)
				return err
			},
		},
		{
			name: "message of a type the daemon does not link",
			want: []error{rdmamgr.ErrUnknownMessage},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				local.sys.Root.Send(h.d.pid, unknownMessage())
				res, err := request(ctx, h.d, unknownMessage())
				if err != nil {
					t.Fatalf("no answer to a message of an unknown type: %v", err)
				}
				er, ok := res.(*rdmapb.ErrorReply)
				if !ok {
					t.Fatalf("answered with %T %v", res, res)
				}
				return wireErr(er.Error)
			},
		},
		{
			// Batches protoactor's endpoint reader would index out of
			// range: the daemon ends the stream, and only the stream.
			name: "malformed actor-protocol batches",
			want: []error{errRefused},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				names := []string{"rdmamgr.v1.Ping"}
				targets := []*protoactor.PID{h.d.pid}
				ping := mustMarshal(&rdmapb.Ping{})
				bad := map[string]*remote.RemoteMessage{
					"type index":    batch(names, targets, &remote.MessageEnvelope{TypeId: 5, MessageData: ping}),
					"negative type": batch(names, targets, &remote.MessageEnvelope{TypeId: -1, MessageData: ping}),
					"target index":  batch(names, targets, &remote.MessageEnvelope{Target: 3, MessageData: ping}),
					"no targets":    batch(names, nil, &remote.MessageEnvelope{MessageData: ping}),
					"sender index":  batch(names, targets, &remote.MessageEnvelope{Sender: 2, SenderRequestId: 7, MessageData: ping}),
					"serializer":    batch(names, targets, &remote.MessageEnvelope{SerializerId: 9, MessageData: ping}),
				}
				var errs []error
				for what, m := range bad {
					s := remotingStream(t, ctx, h.d)
					if err := s.Send(m); err != nil {
						t.Fatalf("%s: send: %v", what, err)
					}
					_, err := s.Recv()
					if err = refusedWith(err, codes.InvalidArgument); !errors.Is(err, errRefused) {
						t.Errorf("%s: got %v; want the stream ended with InvalidArgument", what, err)
					}
					errs = append(errs, err)
				}
				return errs[0]
			},
		},
		{
			// Messages the daemon drops without ending the stream: the
			// malformed batch after them shows the stream still read.
			name: "hostile actor-protocol messages",
			want: []error{errRefused},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				s := remotingStream(t, ctx, h.d)
				target := []*protoactor.PID{h.d.pid}
				send := func(what string, m *remote.RemoteMessage) {
					if err := s.Send(m); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
				send("unknown type", batch([]string{"rdmamgr.hostiletest.Nope"}, target, &remote.MessageEnvelope{MessageData: []byte{1, 2, 3}}))
				send("json junk", batch([]string{"rdmamgr.v1.Ping"}, target, &remote.MessageEnvelope{SerializerId: 1, MessageData: []byte("{{{")}))
				send("terminated without who", batch([]string{"actor.Terminated"}, target, &remote.MessageEnvelope{MessageData: mustMarshal(&protoactor.Terminated{})}))
				send("watch without watcher", batch([]string{"actor.Watch"}, target, &remote.MessageEnvelope{MessageData: mustMarshal(&protoactor.Watch{})}))
				send("stop", batch([]string{"actor.Stop"}, target, &remote.MessageEnvelope{MessageData: mustMarshal(&protoactor.Stop{})}))
				send("poison", batch([]string{"actor.PoisonPill"}, target, &remote.MessageEnvelope{MessageData: mustMarshal(&protoactor.PoisonPill{})}))
				send("malformed", batch([]string{"rdmamgr.v1.Ping"}, target, &remote.MessageEnvelope{TypeId: 1}))
				_, err := s.Recv()

				// Bytes that do not decode as their type: protoactor ends
				// the stream itself (with its own status).
				s2 := remotingStream(t, ctx, h.d)
				if err := s2.Send(batch([]string{"rdmamgr.v1.RequestBuffer"}, target, &remote.MessageEnvelope{MessageData: []byte{0xff, 0xff, 0xff}})); err != nil {
					t.Fatalf("proto junk: %v", err)
				}
				if _, err := s2.Recv(); status.Code(err) == codes.OK || ctx.Err() != nil {
					t.Errorf("proto junk: got %v; want the stream ended", err)
				}
				return refusedWith(err, codes.InvalidArgument)
			},
		},
		{
			// protoactor leaves these unimplemented (they panic).
			name: "unary actor-protocol calls",
			want: []error{errRefused},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				conn, err := grpc.NewClient(h.d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				c := remote.NewRemotingClient(conn)
				_, err = c.GetProcessDiagnostics(ctx, &remote.GetProcessDiagnosticsRequest{})
				expect(t, "GetProcessDiagnostics", refusedWith(err, codes.Unimplemented), errRefused)
				_, err = c.ListProcesses(ctx, &remote.ListProcessesRequest{})
				return refusedWith(err, codes.Unimplemented)
			},
		},
		{
			name: "huge buffer request",
			want: []error{rdmamgr.ErrLimit},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				_, err := h.d.client().RequestBuffer(ctx, 1<<50, buffer.AccessReadWrite)
				return err
			},
		},
	}
}

// handshakeErr sends a hand-made route handshake to d and returns the
// error its answer carries.
func handshakeErr(t *testing.T, ctx context.Context, d *daemon, hs *rdmapb.RouteHandshake) error {
	t.Helper()
	resp, err := handshake(ctx, d, hs)
	if err != nil {
		t.Fatal(err)
	}
	return wireErr(resp.Error)
}
